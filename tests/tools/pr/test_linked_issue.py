"""pr/linked_issue.py through `open-pr`: the issue drafted from the upstream's own issue
template beside the PR body, and with --push opened first, its URL in the PR body and in the
patch's `Bug:` (pin patch and port alike). Git sandboxes; a fake `gh` on PATH records argv."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.tools.pr.issue_templates import MLM_BUG, MLM_FEATURE
from tests.tools.pr.pr_templates import MEGATRON_LM
from tests.tools.repos import commit, init_repo, make_patch, make_superproject, numbered, run
from tools.patchtool.cli import main
from tools.patchtool.errors import PatchToolError
from tools.patchtool.model.manifest import Upstream
from tools.patchtool.pr.linked_issue import LinkedIssue, gh_issue_command, open_issue

pytestmark = pytest.mark.usefixtures("isolated_git")

MOD = "pkg/mod.py"
ISSUE = "https://github.com/NVIDIA/Megatron-LM/issues/42"
PR = "https://github.com/NVIDIA/Megatron-LM/pull/43"
TRAILERS = ["Upstream-Status: pending", "Origin: mcore-rl-stack", "Test: tests/test_x.py::test_fix"]


def _lines(text: str) -> list[str]:
    return text.rstrip("\n").split("\n")


@pytest.fixture(autouse=True)
def contributor(tmp_path: Path, isolated_git: None) -> None:
    config = tmp_path / "isolated.gitconfig"
    config.write_text("[user]\n\tname = Ada Lovelace\n\temail = ada@example.org\n")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A Megatron-LM-like upstream (its PR and issue templates); main moved past the pin v1
    near line 30, so `run.patch` (line 30) needs a port there; `fix.patch` (line 10) not."""
    upstream = tmp_path / "upstream"
    init_repo(
        upstream,
        {
            MOD: numbered(40),
            ".github/pull_request_template.md": _lines(MEGATRON_LM),
            ".github/ISSUE_TEMPLATE/bug_report.md": _lines(MLM_BUG),
            ".github/ISSUE_TEMPLATE/feature_request.md": _lines(MLM_FEATURE),
            ".github/ISSUE_TEMPLATE/config.yml": ["blank_issues_enabled: false"],
        },
    )
    changed = [f"fixed {i}" if i in (10, 30) else f"line {i}" for i in range(1, 41)]
    patches = [
        (
            "fix.patch",
            make_patch(
                upstream,
                "v1",
                {MOD: [*changed[:10], *numbered(40)[10:]]},
                "Keep line ten",
                TRAILERS,
            ),
        ),
        (
            "run.patch",
            make_patch(
                upstream,
                "v1",
                {MOD: [*numbered(40)[:10], *changed[10:]]},
                "Run line thirty on torch",
                TRAILERS,
            ),
        ),
    ]
    commit(
        upstream,
        "main moves on",
        {MOD: [f"main's {i}" if i == 33 else f"line {i}" for i in range(1, 41)]},
    )
    sup = make_superproject(tmp_path / "super", upstream, patches=patches)
    (sup / "tests").mkdir()
    (sup / "tests/test_x.py").write_text("def test_fix():\n    pass\n")
    run(
        ["remote", "set-url", "origin", "https://github.com/NVIDIA/Megatron-LM.git"],
        sup / "3rdparty/Up",
    )
    run(
        ["fetch", "-q", str(upstream), "+refs/heads/main:refs/remotes/origin/main"],
        sup / "3rdparty/Up",
    )
    fork = tmp_path / "fork.git"
    run(["init", "-q", "--bare", str(fork)], tmp_path)
    run(["remote", "add", "fork", str(fork)], sup / "3rdparty/Up")
    return sup


def gh_script(tmp_path: Path, body: str) -> Path:
    """A `gh` on PATH running `body` (Python) after recording argv in gh-calls.json."""
    script = tmp_path / "bin" / "gh"
    script.parent.mkdir(exist_ok=True)
    calls = tmp_path / "gh-calls.json"
    script.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        f"calls = {str(calls)!r}\n"
        "seen = json.load(open(calls)) if os.path.exists(calls) else []\n"
        "json.dump([*seen, sys.argv[1:]], open(calls, 'w'))\n" + body
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def ok_gh(tmp_path: Path) -> Path:
    return gh_script(tmp_path, f"print({ISSUE!r} if sys.argv[1] == 'issue' else {PR!r})\n")


def calls(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "gh-calls.json"
    return json.loads(path.read_text()) if path.exists() else []


def open_pr(root: Path, name: str, *more: str) -> int:
    return main(["--root", str(root), "open-pr", f"patches/Up/{name}", "--remote", "fork", *more])


def test_draft_beside_the_body_from_the_bug_report_with_its_command(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert open_pr(root, "fix.patch") == 0
    out = capsys.readouterr().out
    draft = root / ".cache/pr/Up-fix.issue.md"
    text = draft.read_text()
    assert text.startswith(
        "<!-- Drafted from .github/ISSUE_TEMPLATE/bug_report.md, a bug report because the "
        "subject's first word `Keep` is a fix verb. 3 field(s) left for you: Steps/Code to "
        "reproduce bug, Expected behavior, Additional context. Delete this comment. -->\n\n**Describe the bug**\n\nWhy: a test fix."
    )
    assert (
        f"issue: {draft} (bug report, .github/ISSUE_TEMPLATE/bug_report.md; the subject's first "
        "word `Keep` is a fix verb)\n       gh issue create --title "
        f"'Keep line ten' --body-file {draft}\n"
    ) in out
    assert "note: 3 field(s) of the issue template left for you to fill: Steps/Code" in out
    assert "the PR body's linked issue stays empty until the issue is open" in out
    assert "Linked issue:\n" in (root / ".cache/pr/Up-fix.md").read_text()


def test_a_feature_takes_the_feature_request(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert open_pr(root, "run.patch", "--onto", "v1") == 0
    text = (root / ".cache/pr/Up-run.issue.md").read_text()
    assert "a feature request because the subject's first word `Run` is a feature verb" in text
    assert "**Describe the solution you'd like**\n\nRun line thirty on torch." in text
    assert (
        "2 field(s) of the issue template left for you to fill: Describe alternatives you've "
        "considered, Additional context" in capsys.readouterr().out
    )


def test_push_opens_the_issue_first_and_links_it_everywhere(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["--root", str(root), "port", "patches/Up/run.patch"]) == 0
    monkeypatch.setenv("PATH", f"{ok_gh(tmp_path).parent}{os.pathsep}{os.environ['PATH']}")
    assert open_pr(root, "run.patch", "--push") == 0
    issue, pr = calls(tmp_path)
    assert issue[:3] == ["issue", "create", "--title"]  # no --repo: the upstream is a local path
    assert issue[issue.index("--title") + 1] == "Run line thirty on torch"
    assert pr[:2] == ["pr", "create"]
    body = (root / ".cache/pr/Up-run.md").read_text()
    assert f"Linked issue: {ISSUE}\n" in body
    for path in ("patches/Up/run.patch", "patches/Up/main/run.patch"):  # pin patch and port
        text = (root / path).read_text()
        assert f"\nBug: {ISSUE}\n" in text and f"Upstream-Status: submitted {PR}\n" in text
    assert main(["--root", str(root), "lint"]) == 0
    # A second --push links the same issue: no second one.
    run(["branch", "-D", "mcore-rl-stack/run"], tmp_path / "fork.git")
    assert open_pr(root, "run.patch", "--push", "--force") == 0
    assert [c[0] for c in calls(tmp_path)] == ["issue", "pr", "pr"]


def test_gh_without_network_fails_in_one_line_and_changes_nothing(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    offline = "sys.stderr.write('error connecting to api.github.com\\n'); sys.exit(1)\n"
    monkeypatch.setenv(
        "PATH", f"{gh_script(tmp_path, offline).parent}{os.pathsep}{os.environ['PATH']}"
    )
    before = (root / "patches/Up/fix.patch").read_bytes()
    assert open_pr(root, "fix.patch", "--push") == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(
        "error: gh issue create failed (error connecting to api.github.com): nothing pushed, "
        "no issue opened; the draft is "
    )
    assert [c[:2] for c in calls(tmp_path)] == [["issue", "create"]]
    assert run(["branch", "--list", "mcore-rl-stack/fix"], root / "3rdparty/Up") == ""
    assert run(["branch", "--list"], tmp_path / "fork.git") == ""
    assert (root / "patches/Up/fix.patch").read_bytes() == before


def test_gh_gets_an_argument_list_and_its_url_is_read(tmp_path: Path) -> None:
    hostile = "fix $(touch canary) `x`; rm -rf / & |"
    up = Upstream(
        "Up", "3rdparty/Up", "https://github.com/NVIDIA/Megatron-LM.git", "v1", "0" * 40, "up", None
    )
    cmd = gh_issue_command(up, hostile, "draft.md")
    assert cmd == [
        "gh",
        "issue",
        "create",
        "--repo",
        "NVIDIA/Megatron-LM",
        "--title",
        hostile,
        "--body-file",
        "draft.md",
    ]
    local = Upstream("Up", "3rdparty/Up", "/srv/up.git", "v1", "0" * 40, "up", None)
    assert "--repo" not in gh_issue_command(local, "t", "d.md")
    gh = gh_script(tmp_path, f"print('Creating issue\\n{ISSUE}')\n")
    assert open_issue(LinkedIssue("d.md", hostile, gh=cmd), tmp_path, str(gh)) == ISSUE
    assert calls(tmp_path)[0][5] == hostile and not (tmp_path / "canary").exists()
    silent = gh_script(tmp_path, "")
    with pytest.raises(PatchToolError, match=r"exit 0, no URL printed\): nothing pushed"):
        open_issue(LinkedIssue("d.md", "t", gh=cmd), tmp_path, str(silent))
