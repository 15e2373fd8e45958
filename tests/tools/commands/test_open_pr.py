"""`open-pr` and `set-status`: PR branch, title and body from a patch, offline.

A local bare repository is the fork remote; a fake `gh` records its argv. Patch subjects
full of shell syntax must arrive byte-exact in argv and never run. The person running the tool
is git's user.name/user.email of the isolated global config (`contributor`).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.tools.pr.pr_templates import NEMO_RL
from tests.tools.repos import init_repo, make_superproject, numbered, run, write
from tools.patchtool.apply.apply import apply_upstream
from tools.patchtool.cli import main
from tools.patchtool.model.manifest import load_manifest

pytestmark = pytest.mark.usefixtures("isolated_git")


MOD = "pkg/mod.py"
ADA = "Ada Lovelace <ada@example.org>"


def set_identity(
    tmp_path: Path, name: str = "Ada Lovelace", email: str = "ada@example.org"
) -> None:
    """user.name/user.email in the isolated global config (tests/tools/repos.isolate_git)."""
    config = tmp_path / "isolated.gitconfig"
    config.write_text(f"[user]\n\tname = {name}\n\temail = {email}\n" if name else "")


@pytest.fixture(autouse=True)
def contributor(tmp_path: Path, isolated_git: None) -> None:
    set_identity(tmp_path)


def hostile_subject(tmp_path: Path) -> str:
    canary = tmp_path / "canary"
    return f"fix \"quoted\" 'single' $(touch {canary}1) `touch {canary}2`; touch {canary}3 & |"


def patch_with(upstream: Path, message: str) -> bytes:
    """A format-patch of one commit with exactly `message` (made by plain git)."""
    run(["checkout", "-q", "--detach", "v1"], upstream)
    (upstream / MOD).write_text("\n".join(numbered(41)) + "\n")
    run(["commit", "-q", "-a", "-F", "-"], upstream, input=message.encode())
    data = run(
        [
            "format-patch",
            "--stdout",
            "--full-index",
            "--no-signature",
            "--zero-commit",
            "-k",
            "HEAD^!",
        ],
        upstream,
    )
    run(["checkout", "-q", "main"], upstream)
    return (data + "\n").encode()


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, str]:
    upstream = tmp_path / "upstream"
    init_repo(upstream, {MOD: numbered(40)})
    subject = hostile_subject(tmp_path)
    message = (
        f"{subject}\n\nWhy: `ids_to_text` fails with $(TypeError).\n\nTested: the tripwire.\n\n"
        "Upstream-Status: pending\nOrigin: mcore-rl-stack\nTest: tests/test_x.py::test_fix\n"
    )
    root = make_superproject(
        tmp_path / "super", upstream, patches=[("fix.patch", patch_with(upstream, message))]
    )
    fork = tmp_path / "fork.git"
    run(["init", "-q", "--bare", str(fork)], tmp_path)
    run(["remote", "add", "fork", str(fork)], root / "3rdparty/Up")
    return root, fork, subject


ISSUE_URL = "https://github.com/NVIDIA/x/issues/6"


def fake_gh(tmp_path: Path, url: str = "https://github.com/NVIDIA/x/pull/7") -> Path:
    """A `gh` that records argv as JSON (every call in gh-calls.json, the last in gh-argv.json)
    and prints the URL of what it made: an issue for `issue create`, else the PR."""
    script = tmp_path / "bin" / "gh"
    script.parent.mkdir()
    calls = tmp_path / "gh-calls.json"
    script.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        f"calls = {str(calls)!r}\n"
        "seen = json.load(open(calls)) if os.path.exists(calls) else []\n"
        "json.dump([*seen, sys.argv[1:]], open(calls, 'w'))\n"
        f"open({str(tmp_path / 'gh-argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        f"print({ISSUE_URL!r} if sys.argv[1] == 'issue' else {url!r})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def git_only_path(tmp_path: Path) -> str:
    """A PATH with git but certainly no gh."""
    bindir = tmp_path / "gitonly"
    bindir.mkdir()
    import shutil

    git = shutil.which("git")
    assert git
    (bindir / "git").symlink_to(git)
    return str(bindir)


def test_open_pr_builds_branch_and_body_without_pushing(
    setup: tuple[Path, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, fork, subject = setup
    checkout = root / "3rdparty/Up"
    head_before = run(["rev-parse", "HEAD"], checkout)
    assert main(["--root", str(root), "open-pr", "patches/Up/fix.patch", "--remote", "fork"]) == 0
    out = capsys.readouterr().out
    branch = "mcore-rl-stack/fix"
    tip = run(["rev-parse", branch], checkout)
    assert run(["rev-parse", f"{branch}^"], checkout) == run(["rev-parse", "origin/main"], checkout)
    assert run(["log", "-1", "--format=%s", tip], checkout) == subject
    assert run(["rev-parse", "HEAD"], checkout) == head_before  # work tree untouched
    assert run(["worktree", "list"], checkout).count("\n") == 0
    body = (root / ".cache/pr/Up-fix.md").read_text()
    assert body.startswith("Why: `ids_to_text` fails with $(TypeError).\n\nTested: the tripwire.\n")
    assert "Upstream-Status" not in body
    assert "fails on the unpatched upstream" in body
    assert f"push:  git -C {checkout} push fork {tip}:refs/heads/{branch}" in out
    assert "pr:    gh pr create --base main --head mcore-rl-stack/fix --title " in out
    assert "nothing pushed" in out
    assert run(["branch", "--list"], fork) == ""
    assert not list(tmp_path.glob("canary*"))


def test_push_without_gh_refuses_before_changing_anything(
    setup: tuple[Path, Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 58: --push opens the linked issue with gh first; without gh it fails in one line
    and changes nothing (no PR branch, nothing pushed, the patch as it was)."""
    root, fork, _subject = setup
    before = (root / "patches/Up/fix.patch").read_bytes()
    monkeypatch.setenv("PATH", git_only_path(tmp_path))
    args = ["--root", str(root), "open-pr", "patches/Up/fix.patch", "--remote", "fork", "--push"]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "gh is not installed: nothing pushed" in captured.err
    assert run(["branch", "--list", "mcore-rl-stack/fix"], root / "3rdparty/Up") == ""
    assert run(["branch", "--list"], fork) == ""
    assert (root / "patches/Up/fix.patch").read_bytes() == before
    assert not list(tmp_path.glob("canary*"))


def test_push_of_a_patch_with_its_issue_needs_no_gh_for_the_issue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A patch whose `Bug:` names its issue drafts none: --push pushes without gh and says
    what is left."""
    upstream = tmp_path / "upstream"
    init_repo(upstream, {MOD: numbered(40)})
    text = (
        "Fix mod\n\nWhy: mod breaks.\n\nUpstream-Status: pending\nOrigin: mcore-rl-stack\n"
        "Test: tests/test_x.py::test_fix\nBug: https://github.com/NVIDIA/x/issues/3\n"
    )
    root = make_superproject(
        tmp_path / "super", upstream, patches=[("fix.patch", patch_with(upstream, text))]
    )
    fork = tmp_path / "fork.git"
    run(["init", "-q", "--bare", str(fork)], tmp_path)
    run(["remote", "add", "fork", str(fork)], root / "3rdparty/Up")
    monkeypatch.setenv("PATH", git_only_path(tmp_path))
    args = ["--root", str(root), "open-pr", "patches/Up/fix.patch", "--remote", "fork", "--push"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "gh not found" in out and "set-status patches/Up/fix.patch submitted <PR URL>" in out
    assert "note: linked issue: https://github.com/NVIDIA/x/issues/3" in out
    assert "\nissue: " not in out and not list((root / ".cache/pr").glob("*.issue.md"))
    assert run(["log", "-1", "--format=%s", "mcore-rl-stack/fix"], fork) == "Fix mod"
    assert b"Upstream-Status: pending" in (root / "patches/Up/fix.patch").read_bytes()


def test_push_with_gh_records_url_and_keeps_export_stable(
    setup: tuple[Path, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _fork, subject = setup
    apply_upstream(root, load_manifest(root).upstreams["Up"])
    assert main(["--root", str(root), "export", "Up"]) == 0  # canonical bytes first
    gh = fake_gh(tmp_path)
    monkeypatch.setenv("PATH", f"{gh.parent}{os.pathsep}{os.environ['PATH']}")
    args = ["--root", str(root), "open-pr", "patches/Up/fix.patch", "--remote", "fork", "--push"]
    assert main(args) == 0
    issue, argv = json.loads((tmp_path / "gh-calls.json").read_text())
    assert issue[:2] == ["issue", "create"]  # the issue first
    assert issue[issue.index("--title") + 1] == subject  # byte-exact, never shell-parsed
    assert argv[:4] == ["pr", "create", "--base", "main"]
    assert argv[argv.index("--title") + 1] == subject
    assert not list(tmp_path.glob("canary*"))
    text = (root / "patches/Up/fix.patch").read_text()
    assert "\nUpstream-Status: submitted https://github.com/NVIDIA/x/pull/7\n" in text
    assert f"\nBug: {ISSUE_URL}\n" in text
    body = (root / argv[argv.index("--body-file") + 1]).read_text()
    assert f"- Related to {ISSUE_URL}" in body  # the PR links the issue it opened
    # The patched branch was reworded too: a fresh export equals the edited file.
    assert main(["--root", str(root), "export", "--check", "Up"]) == 0
    assert main(["--root", str(root), "status", "Up"]) == 0


def failing_gh(tmp_path: Path) -> Path:
    """A `gh` that opens the issue, then fails `pr create` the way an unauthenticated one
    does."""
    script = tmp_path / "bin" / "gh"
    script.parent.mkdir()
    script.write_text(
        "#!/usr/bin/env python3\nimport sys\n"
        f"if sys.argv[1] == 'issue':\n    print({ISSUE_URL!r})\n    sys.exit(0)\n"
        "sys.stderr.write('HTTP 401: Bad credentials\\n')\nsys.exit(1)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_gh_failure_after_push_is_an_error_saying_what_is_left(
    setup: tuple[Path, Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 18 defect 6: `open-pr --push` exited 0 when `gh pr create` failed after the push."""
    root, fork, subject = setup
    gh = failing_gh(tmp_path)
    monkeypatch.setenv("PATH", f"{gh.parent}{os.pathsep}{os.environ['PATH']}")
    args = ["--root", str(root), "open-pr", "patches/Up/fix.patch", "--remote", "fork", "--push"]
    assert main(args) == 1
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert run(["log", "-1", "--format=%s", "mcore-rl-stack/fix"], fork) == subject  # pushed
    assert "HTTP 401: Bad credentials" in out
    assert "pushed mcore-rl-stack/fix to fork" in out
    assert "left to do: gh pr create --base main --head mcore-rl-stack/fix --title " in out
    assert "set-status patches/Up/fix.patch submitted <PR URL>" in out
    data = (root / "patches/Up/fix.patch").read_bytes()
    assert b"Upstream-Status: pending" in data and f"Bug: {ISSUE_URL}".encode() in data


def test_pr_body_reads_as_an_upstream_contribution(setup: tuple[Path, Path, str]) -> None:
    """Issue 18 defect 7: the body carried our Origin:/Test: trailers and paths of ours."""
    root, _fork, _subject = setup
    (root / "tests").mkdir()
    (root / "tests/test_x.py").write_text(
        "import os\n\n\ndef helper():\n    return 1\n\n\n"
        'def test_fix():\n    """ids_to_text takes a list."""\n    assert helper() == 1\n'
    )
    assert main(["--root", str(root), "open-pr", "patches/Up/fix.patch"]) == 0
    body = (root / ".cache/pr/Up-fix.md").read_text()
    for internal in ("Origin:", "Test:", "mcore-rl-stack", "tests/test_x.py", "patches/"):
        assert internal not in body, internal
    assert body.startswith("Why: `ids_to_text` fails with $(TypeError).\n\nTested: the tripwire.\n")
    assert "fails on the unpatched upstream, passes with this change" in body
    assert '```python\ndef test_fix():\n    """ids_to_text takes a list."""\n' in body
    assert "def helper" not in body  # only the test itself is inlined


def test_newline_in_subject_becomes_one_title_line(tmp_path: Path) -> None:
    upstream = tmp_path / "upstream"
    init_repo(upstream, {MOD: numbered(40)})
    message = (
        "first half\n$(second half)\n\nWhy.\n\nUpstream-Status: pending\nOrigin: o\nTest: t.py::t\n"
    )
    root = make_superproject(
        tmp_path / "super", upstream, patches=[("nl.patch", patch_with(upstream, message))]
    )
    assert main(["--root", str(root), "open-pr", "patches/Up/nl.patch"]) == 0
    title = run(["log", "-1", "--format=%s", "mcore-rl-stack/nl"], root / "3rdparty/Up")
    assert title == "first half $(second half)"


def test_set_status_validates_and_rewrites_only_the_trailer(
    setup: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _fork, _subject = setup
    path = root / "patches/Up/fix.patch"
    before = path.read_bytes()
    assert (
        main(["--root", str(root), "set-status", "patches/Up/fix.patch", "submitted", "not a url"])
        == 1
    )
    assert "needs the PR URL" in capsys.readouterr().err
    assert path.read_bytes() == before
    url = "https://github.com/NVIDIA/Megatron-LM/pull/1"
    assert main(["--root", str(root), "set-status", str(path), "submitted", url]) == 0
    after = path.read_bytes()
    assert after == before.replace(
        b"Upstream-Status: pending", f"Upstream-Status: submitted {url}".encode()
    )
    assert main(["--root", str(root), "set-status", str(path), "submitted", url]) == 0
    assert "nothing changed" in capsys.readouterr().out


# --- the PR a contributor would open by hand (issue 45 item 5) -------------------------------

BOT_ENV = {
    "GIT_AUTHOR_NAME": "mcore-rl-stack",
    "GIT_AUTHOR_EMAIL": "mcore-rl-stack@users.noreply.github.com",
}
BOT_SIGNOFF = "Signed-off-by: mcore-rl-stack <mcore-rl-stack@users.noreply.github.com>"
UPSTREAM_TEST = "tests/unit/test_mod.py"
CONVENTIONAL = "Titles follow Conventional Commits: `fix(scope): description`.\n"


def bot_patch(
    upstream: Path, base: str, files: dict[str, list[str]], message: str
) -> tuple[bytes, str]:
    """(mbox, commit) of one commit on `base` by this repository's bot identity."""
    run(["checkout", "-q", "--detach", base], upstream)
    for rel, lines in files.items():
        write(upstream, rel, lines)
    run(["add", "--", *files], upstream)
    run(["commit", "-q", "-F", "-"], upstream, env=BOT_ENV, input=message.encode())
    sha = run(["rev-parse", "HEAD"], upstream)
    data = run(
        ["format-patch", "--stdout", "--full-index", "--no-signature", "-k", "HEAD^!"], upstream
    )
    run(["checkout", "-q", "main"], upstream)
    return (data + "\n").encode(), sha


def message(subject: str, *trailers: str) -> str:
    return f"{subject}\n\nWhy: `mod` forgets line 1.\n\nUpstream-Status: pending\n" + "\n".join(
        [*trailers, BOT_SIGNOFF, ""]
    )


@pytest.fixture
def nemo_like(tmp_path: Path) -> tuple[Path, Path]:
    """An upstream with NeMo-RL's PR template and a conventional-commits CONTRIBUTING.md; one
    patch by the bot that fixes pkg/mod.py and adds an upstream test, every trailer of ours."""
    upstream = tmp_path / "upstream"
    init_repo(
        upstream,
        {
            MOD: numbered(40),
            ".github/PULL_REQUEST_TEMPLATE.md": list(NEMO_RL.rstrip("\n").split("\n")),
            "CONTRIBUTING.md": [CONVENTIONAL],
        },
    )
    text = message(
        "Fix the first line of mod",
        "Bug: https://github.com/NVIDIA-NeMo/RL/issues/5",
        "Origin: mcore-rl-stack; issue 45",
        "Test: tests/patches/test_mod.py::test_fix",
        f"Upstream-Test: {UPSTREAM_TEST}::test_first_line",
    )
    files = {
        MOD: ["line 1 fixed", *numbered(40)[1:]],
        UPSTREAM_TEST: ["def test_first_line():", "    pass"],
    }
    data, _ = bot_patch(upstream, "v1", files, text)
    root = make_superproject(tmp_path / "super", upstream, patches=[("fix.patch", data)])
    fork = tmp_path / "fork.git"
    run(["init", "-q", "--bare", str(fork)], tmp_path)
    run(["remote", "add", "fork", str(fork)], root / "3rdparty/Up")
    return root, fork


def test_pushed_commit_is_the_contributors_own_with_the_upstream_test(
    nemo_like: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, fork = nemo_like
    patch_file = root / "patches/Up/fix.patch"
    before = patch_file.read_bytes()
    monkeypatch.setenv("PATH", git_only_path(tmp_path))
    args = ["--root", str(root), "open-pr", "patches/Up/fix.patch", "--remote", "fork", "--push"]
    assert main(args) == 0
    out = capsys.readouterr().out
    branch = "mcore-rl-stack/fix"
    who = run(["log", "-1", "--format=%an <%ae>%n%cn <%ce>", branch], fork)
    assert who == f"{ADA}\n{ADA}"
    assert run(["log", "-1", "--format=%(trailers)", branch], fork) == f"Signed-off-by: {ADA}"
    full = run(["log", "-1", "--format=%B", branch], fork)
    assert (
        full == f"Fix the first line of mod\n\nWhy: `mod` forgets line 1.\n\nSigned-off-by: {ADA}"
    )
    for foreign in (
        "Upstream-",
        "Origin",
        "Test:",
        "Bug:",
        "Depends-On",
        "mcore-rl-stack",
        "noreply",
    ):
        assert foreign not in full, foreign
    assert UPSTREAM_TEST in run(["ls-tree", "-r", "--name-only", branch], fork).split("\n")
    assert patch_file.read_bytes() == before  # our trailers stay in our patch file
    body = (root / ".cache/pr/Up-fix.md").read_text()
    assert body.startswith("# What does this PR do ?\n\nWhy: `mod` forgets line 1.\n\n**Tests**\n")
    assert f"- `{UPSTREAM_TEST}::test_first_line`" in body
    assert (
        "- Related to https://github.com/NVIDIA-NeMo/RL/issues/5" in body
    )  # not a GitHub upstream here
    assert "- [x] Did you write any new necessary tests?" in body
    assert "- [ ] Did you run the unit tests and functional tests locally?" in body
    assert "- [ ] Did you add or update any necessary documentation?" in body
    for ours in ("<!--", "Upstream-Status", "tests/patches", "Origin", "mcore-rl-stack"):
        assert ours not in body, ours
    assert "filled .github/PULL_REQUEST_TEMPLATE.md" in out
    assert (
        "note: title: not `type(scope): description` (Conventional Commits) (CONTRIBUTING.md)"
        in out
    )
    assert "note: 3 checklist box(es) of the template left for you to answer" in out


def test_unset_identity_is_refused_in_one_line(
    nemo_like: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, _fork = nemo_like
    checkout = root / "3rdparty/Up"
    set_identity(tmp_path, name="")
    args = ["--root", str(root), "open-pr", "patches/Up/fix.patch"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "error: 3rdparty/Up: git user.name and user.email not set"
    )
    assert 'git config --global user.name "Your Name"' in err
    assert run(["branch", "--list", "mcore-rl-stack/*"], checkout) == ""
    # As resolved in the checkout: its own config counts.
    run(["config", "user.name", "Grace Hopper"], checkout)
    run(["config", "user.email", "grace@example.org"], checkout)
    assert main(args) == 0
    trailers = run(["log", "-1", "--format=%an|%(trailers)", "mcore-rl-stack/fix"], checkout)
    assert trailers == "Grace Hopper|Signed-off-by: Grace Hopper <grace@example.org>"


@pytest.fixture
def chain(tmp_path: Path) -> Path:
    """Two patches of one upstream: p2 edits what p1 wrote (it applies only on top of it)."""
    upstream = tmp_path / "upstream"
    init_repo(upstream, {MOD: numbered(40)})
    p1, sha = bot_patch(
        upstream, "v1", {MOD: ["line 1 v2", *numbered(40)[1:]]}, message("fix(mod): one")
    )
    text = message("fix(mod): two", "Depends-On: Up/p1.patch")
    p2, _ = bot_patch(upstream, sha, {MOD: ["line 1 v3", *numbered(40)[1:]]}, text)
    return make_superproject(
        tmp_path / "super", upstream, patches=[("p1.patch", p1), ("p2.patch", p2)]
    )


def test_stack_opens_on_the_dependency_pr_branch(
    chain: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, checkout = chain, chain / "3rdparty/Up"
    cli = ["--root", str(root), "open-pr"]
    assert main([*cli, "patches/Up/p2.patch", "--stack"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no branch mcore-rl-stack/p1 (the PR branch of p1.patch)" in err
    assert "open that PR first: tools/patches open-pr patches/Up/p1.patch" in err
    assert main([*cli, "patches/Up/p2.patch"]) == 1  # without --stack it does not apply on main
    err = capsys.readouterr().err
    assert "does not apply" in err and "it Depends-On p1.patch" in err and "--stack" in err
    assert main([*cli, "patches/Up/p1.patch"]) == 0
    capsys.readouterr()
    assert main([*cli, "patches/Up/p2.patch", "--stack"]) == 0
    out = capsys.readouterr().out
    assert run(["rev-parse", "mcore-rl-stack/p2^"], checkout) == run(
        ["rev-parse", "mcore-rl-stack/p1"], checkout
    )
    assert run(["log", "-1", "--format=%an <%ae>", "mcore-rl-stack/p2"], checkout) == ADA
    assert "base:  mcore-rl-stack/p1" in out
    assert "pr:    gh pr create --base mcore-rl-stack/p1 --head mcore-rl-stack/p2 " in out
    body = (root / ".cache/pr/Up-p2.md").read_text()
    assert '- Stacked on "fix(mod): one" (PR not opened yet; branch `mcore-rl-stack/p1`)' in body
    assert main([*cli, "patches/Up/p1.patch", "--stack"]) == 1
    assert "p1.patch has no Depends-On: on another Up patch" in capsys.readouterr().err


def test_onto_starts_elsewhere_and_keeps_the_pr_base(
    setup: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _fork, _subject = setup
    checkout = root / "3rdparty/Up"
    cli = ["--root", str(root), "open-pr", "patches/Up/fix.patch"]
    assert main([*cli, "--onto", "nosuchref"]) == 1
    assert "--onto nosuchref: no such commit here" in capsys.readouterr().err
    assert main([*cli, "--onto", "v1"]) == 0
    assert "gh pr create --base main --head mcore-rl-stack/fix" in capsys.readouterr().out
    assert run(["rev-parse", "mcore-rl-stack/fix^"], checkout) == run(["rev-parse", "v1"], checkout)
