"""rebase/flow.py through `tools/patches rebase`: writes on success, nothing outside the scratch
tree on conflict; stand-in bases; the real Megatron-LM series on a release stand-in."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.network import pypi_reachable
from tests.tools.rebase.scenario import MOD, classes, fixed
from tests.tools.repos import (
    commit,
    make_patch,
    make_superproject,
    numbered,
    run,
    trailers,
    tree_state,
)
from tools.patchtool.cli import main
from tools.patchtool.errors import PatchToolError
from tools.patchtool.model.manifest import Standin
from tools.patchtool.rebase.flow import run_rebase
from tools.patchtool.rebase.result import OFFSET, UPSTREAMED
from tools.patchtool.rebase.scratch import create_scratch

pytestmark = pytest.mark.usefixtures("isolated_git")


# --- the command: writes on success, nothing outside the scratch tree on conflict -------------


@pytest.fixture
def project(tmp_path: Path, upstream: Path) -> Path:
    """Series [a, b] on v1; v2 upstreams a (same change, bigger commit) and shifts b."""
    a = make_patch(upstream, "v1", {MOD: fixed(numbered(40), 5, "patched 6")}, "fix a", trailers())
    b = make_patch(
        upstream, "v1", {MOD: fixed(numbered(40), 30, "patched 31")}, "fix b", trailers()
    )
    v2 = ["# header", *fixed(numbered(40), 5, "patched 6")]
    commit(upstream, "upstream takes a", {MOD: v2, "pkg/other.py": numbered(9, "other")})
    run(["tag", "v2"], upstream)
    return make_superproject(tmp_path / "super", upstream, patches=[("a.patch", a), ("b.patch", b)])


def rebase_cli(root: Path, *args: str) -> int:
    return main(["--root", str(root), "rebase", "Up", *args])


def test_rebase_writes_series_retires_upstreamed_and_moves_pin(
    project: Path, upstream: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v2 = run(["rev-parse", "v2"], upstream)
    gitmodules = (project / ".gitmodules").read_bytes()
    old_b = (project / "patches/Up/b.patch").read_bytes()
    scratch = tmp_path / "scratch"
    assert rebase_cli(project, "--to", "v2", "--scratch", str(scratch)) == 0
    out = capsys.readouterr().out
    assert "a.patch  upstreamed" in out and "b.patch  offset" in out
    assert (project / "patches/Up/series").read_text() == "b.patch\n"
    new_b = (project / "patches/Up/b.patch").read_bytes()
    assert new_b != old_b and b"@@ -29,7 +29,7 @@ line 27" in new_b  # line numbers regenerated
    assert not (project / "patches/Up/a.patch").exists()
    retired = (project / "patches/Up/upstreamed/a.patch").read_text()
    assert (
        "\n\nUpstream-Status: accepted v2\nUpstream-Evidence: reverse (the patch reverse-applies"
        " on v2); found by tools/patches rebase onto v2\nOrigin: mcore-rl-stack\n"
        "Test: tests/test_x.py::test_fix\n\ndiff --git"
    ) in retired  # one trailer block, status first
    assert run(["ls-files", "-s", "3rdparty/Up"], project).split()[1] == v2
    manifest = (project / "patches/upstreams.toml").read_text()
    assert f'commit = "{v2}"' in manifest and 'tag = "v2"' in manifest
    assert (project / ".gitmodules").read_bytes() == gitmodules
    report = (project / "docs/rebases/Up-v1-to-v2.md").read_text()
    assert "| 1 | `a.patch` | upstreamed |" in report and "## range-diff" in report
    assert not scratch.exists()
    # The rewritten series applies strictly on the new pin and round-trips through export.
    run(["checkout", "-q", "--detach", v2], project / "3rdparty/Up")
    assert main(["--root", str(project), "apply", "Up"]) == 0
    assert main(["--root", str(project), "export", "--check", "Up"]) == 0


def test_dry_run_changes_nothing(project: Path) -> None:
    before = tree_state(project)
    assert rebase_cli(project, "--to", "v2", "--dry-run") == 0
    assert tree_state(project) == before
    assert not (project / "docs").exists()


def conflicting_project(tmp_path: Path, upstream: Path) -> Path:
    a = make_patch(upstream, "v1", {MOD: fixed(numbered(40), 5, "patched 6")}, "fix a", trailers())
    b = make_patch(
        upstream, "v1", {MOD: fixed(numbered(40), 30, "patched 31")}, "fix b", trailers()
    )
    commit(upstream, "conflicting", {MOD: fixed(numbered(40), 5, "upstream 6")})
    run(["tag", "v2"], upstream)
    return make_superproject(tmp_path / "super", upstream, patches=[("a.patch", a), ("b.patch", b)])


def test_conflict_changes_nothing_outside_scratch_and_resume_finishes(
    tmp_path: Path, upstream: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = conflicting_project(tmp_path, upstream)
    before = tree_state(root)
    scratch = tmp_path / "scratch"
    assert rebase_cli(root, "--to", "v2", "--scratch", str(scratch)) == 2
    out = capsys.readouterr().out
    assert "conflict: nothing outside" in out
    assert f"git add -- {MOD}" in out and f"rebase Up --resume {scratch}" in out
    assert tree_state(root) == before
    assert not (root / "docs").exists()
    assert "<<<<<<<" in (scratch / MOD).read_text()
    assert (tmp_path / "scratch.md").is_file()
    # Finish by hand exactly as printed, then resume.
    resolved = fixed(numbered(40), 5, "upstream 6 and patched")
    (scratch / MOD).write_text("\n".join(resolved) + "\n")
    run(["add", "--", MOD], scratch)
    run(["am", "--continue"], scratch)
    assert rebase_cli(root, "--resume", str(scratch)) == 0
    out = capsys.readouterr().out
    assert "resolved-by-hand" in out and "b.patch  clean" in out
    assert b"+upstream 6 and patched" in (root / "patches/Up/a.patch").read_bytes()
    assert run(["ls-files", "-s", "3rdparty/Up"], root).split()[1] == run(
        ["rev-parse", "v2"], upstream
    )


def files_under(path: Path) -> dict[str, bytes]:
    """Every file under `path` (a scratch tree, .git included) with its bytes."""
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_resume_dry_run_keeps_the_scratch_tree_and_its_resolution(
    tmp_path: Path, upstream: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18 defect 1: `--resume DIR --dry-run` deleted DIR with the hand resolution."""
    root = conflicting_project(tmp_path, upstream)
    scratch = tmp_path / "scratch"
    assert rebase_cli(root, "--to", "v2", "--scratch", str(scratch)) == 2
    resolved = fixed(numbered(40), 5, "upstream 6 and patched")
    (scratch / MOD).write_text("\n".join(resolved) + "\n")
    run(["add", "--", MOD], scratch)
    run(["am", "--continue"], scratch)
    before, scratch_before = tree_state(root), files_under(scratch)
    report_before = (tmp_path / "scratch.md").read_bytes()
    capsys.readouterr()
    assert rebase_cli(root, "--resume", str(scratch), "--dry-run") == 0
    out = capsys.readouterr().out
    assert "resolved-by-hand" in out and "dry run: nothing changed" in out
    assert tree_state(root) == before
    assert files_under(scratch) == scratch_before  # not one byte of the scratch tree moved
    assert (tmp_path / "scratch.md").read_bytes() == report_before
    # The real resume still finds the interrupted rebase and finishes it.
    assert rebase_cli(root, "--resume", str(scratch)) == 0
    assert b"+upstream 6 and patched" in (root / "patches/Up/a.patch").read_bytes()


def test_resume_refuses_while_am_in_progress(tmp_path: Path, upstream: Path) -> None:
    root = conflicting_project(tmp_path, upstream)
    scratch = tmp_path / "scratch"
    assert rebase_cli(root, "--to", "v2", "--scratch", str(scratch)) == 2
    before = tree_state(root)
    assert rebase_cli(root, "--resume", str(scratch)) == 1
    assert tree_state(root) == before


# --- stand-in bases (no upstream history) ------------------------------------------------------


def zip_downloader(upstream: Path) -> Callable[[Standin, Path], Path]:
    """A 'PyPI' that serves `git archive` zips of the upstream's tags v<version>."""

    def download(standin: Standin, cache: Path) -> Path:
        out = cache / f"up-{standin.version}-py3-none-any.whl"
        run(["archive", "--format=zip", "-o", str(out), f"v{standin.version}", "pkg"], upstream)
        return out

    return download


STANDIN = (
    '\n[Up.standin]\nkind = "wheel"\npackage = "up"\ntag_format = "v{version}"\n'
    'version = "1"\nproxy = false\n\n[Up.standin.paths]\n"pkg/" = "pkg/"\n'
)


def test_standin_rebase_classifies_and_needs_commit_to_move_pin(
    tmp_path: Path, upstream: Path
) -> None:
    a = make_patch(upstream, "v1", {MOD: fixed(numbered(40), 5, "patched 6")}, "fix a", trailers())
    b = make_patch(
        upstream, "v1", {MOD: fixed(numbered(40), 30, "patched 31")}, "fix b", trailers()
    )
    commit(upstream, "take a", {MOD: ["# h", *fixed(numbered(40), 5, "patched 6")]})
    run(["tag", "v2"], upstream)
    root = make_superproject(
        tmp_path / "super", upstream, patches=[("a.patch", a), ("b.patch", b)], standin=STANDIN
    )
    shutil.rmtree(root / "3rdparty/Up")  # no clone here, and the URL is unreachable
    up_url = tmp_path / "gone"
    text = (root / "patches/upstreams.toml").read_text().replace(str(upstream), str(up_url))
    (root / "patches/upstreams.toml").write_text(text)
    before = tree_state(root)
    download = zip_downloader(upstream)
    result, report, _ = run_rebase(root, "Up", "v2", dry_run=True, downloader=download)
    assert classes(result) == {"a.patch": UPSTREAMED, "b.patch": OFFSET}
    assert not result.new.history and result.new.label == "up 2 stand-in"
    assert any("patch-id" in n for n in result.patches[0].not_checked)
    assert "release stand-in, no upstream history" in report.read_text()
    assert tree_state(root) == before
    with pytest.raises(PatchToolError, match="pass --commit"):
        run_rebase(root, "Up", "v2", downloader=download)
    assert tree_state(root) == before
    v2 = run(["rev-parse", "v2"], upstream)
    run_rebase(root, "Up", "v2", new_commit=v2, downloader=download)
    manifest = (root / "patches/upstreams.toml").read_text()
    assert f'commit = "{v2}"' in manifest and 'version = "2"' in manifest
    assert (root / "patches/Up/series").read_text() == "b.patch\n"


PROXY_STANDIN = (
    '\n[Up.standin]\nkind = "wheel"\npackage = "up"\ntag_format = "v{version}"\n'
    'version = "1"\nproxy = true\nproxy_basis = "nearest release to the old pin: 1"\n\n'
    '[Up.standin.paths]\n"pkg/" = "pkg/"\n'
)


def proxy_project(tmp_path: Path, upstream: Path) -> Path:
    """Pinned at a non-release commit after v1 with release 1 as its proxy; v2 is a release."""
    b = make_patch(
        upstream, "v1", {MOD: fixed(numbered(40), 30, "patched 31")}, "fix b", trailers()
    )
    commit(upstream, "past v1", {"pkg/other.py": numbered(6, "other")})
    run(["tag", "mid"], upstream)
    commit(upstream, "v2", {"pkg/other.py": numbered(7, "other")})
    run(["tag", "v2"], upstream)
    root = make_superproject(
        tmp_path / "super", upstream, patches=[("b.patch", b)], tag="mid", standin=PROXY_STANDIN
    )
    path = root / "patches/upstreams.toml"
    path.write_text(path.read_text().replace('tag = "mid"', 'tag = ""'))
    run(["commit", "-q", "-am", "non-release pin"], root)
    return root


def test_rebase_onto_a_release_clears_the_proxy(tmp_path: Path, upstream: Path) -> None:
    """Issue 18 defect 2: after a rebase onto a release tag the manifest kept proxy = true."""
    from tools.patchtool.model.manifest import load_manifest, standin_problems

    root = proxy_project(tmp_path, upstream)
    assert standin_problems(load_manifest(root).upstreams["Up"]) == []
    assert rebase_cli(root, "--to", "v2") == 0
    up = load_manifest(root).upstreams["Up"]
    assert up.standin is not None
    assert (up.tag, up.standin.version, up.standin.proxy, up.standin.basis) == (
        "v2",
        "2",
        False,
        "",
    )
    assert "proxy_basis" not in (root / "patches/upstreams.toml").read_text()
    assert standin_problems(load_manifest(root).upstreams["Up"]) == []


def test_rebase_onto_a_local_only_tag_never_writes_an_empty_version(
    tmp_path: Path, upstream: Path
) -> None:
    """Issue 18 defect 2: a tag that exists only in the local clone gave version = ""."""
    from tools.patchtool.model.manifest import load_manifest, standin_problems

    root = proxy_project(tmp_path, upstream)
    commit(upstream, "past v2", {"pkg/other.py": numbered(8, "other")})
    checkout = root / "3rdparty/Up"
    run(["fetch", "-q", str(upstream), "main"], checkout)
    run(["tag", "my-local", "FETCH_HEAD"], checkout)
    assert rebase_cli(root, "--to", "my-local") == 0
    text = (root / "patches/upstreams.toml").read_text()
    assert 'version = ""' not in text
    up = load_manifest(root).upstreams["Up"]
    assert up.standin is not None and up.standin.proxy and up.standin.version
    assert up.tag != "my-local"  # not an upstream tag: the pin is a commit
    assert standin_problems(load_manifest(root).upstreams["Up"]) == []


def test_short_sha_without_a_checkout_says_what_is_wrong(
    project: Path, upstream: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18 defect 5: a short sha without a checkout was "not a release tag ... offline"."""
    shutil.rmtree(project / "3rdparty/Up")
    (project / "3rdparty/Up").mkdir()
    before = tree_state(project)
    v2 = run(["rev-parse", "v2"], upstream)
    assert rebase_cli(project, "--to", v2[:10]) == 1
    err = capsys.readouterr().err
    assert "offline" not in err and "not a release tag" not in err
    assert "abbreviated commit id" in err and "full 40-hex commit" in err
    assert tree_state(project) == before
    assert rebase_cli(project, "--to", v2, "--dry-run") == 0  # the full id works
    assert f"resolved: {v2} -> {v2} (" in capsys.readouterr().out


def test_origin_branch_resolves_at_the_url_as_it_is_now(
    project: Path, upstream: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18 defect 5: `--to origin/main` took the clone's stale remote-tracking ref."""
    checkout = project / "3rdparty/Up"
    stale = run(["rev-parse", "origin/main"], checkout)
    now = commit(upstream, "main moves on", {"pkg/other.py": numbered(12, "other")})
    assert stale != now and run(["rev-parse", "origin/main"], checkout) == stale
    assert rebase_cli(project, "--to", "origin/main", "--dry-run") == 0
    out = capsys.readouterr().out
    date = run(["log", "-1", "--format=%cI", now], upstream)
    assert f"resolved: origin/main -> {now} ({date}) from {upstream} (now)" in out


def test_moving_the_pin_backwards_needs_a_flag(
    tmp_path: Path, upstream: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18 defect 4: a rebase onto an older release moved the pin back without a word."""
    b = make_patch(
        upstream, "v1", {MOD: fixed(numbered(40), 30, "patched 31")}, "fix b", trailers()
    )
    commit(upstream, "v2", {"pkg/other.py": numbered(7, "other")})
    run(["tag", "v2"], upstream)
    root = make_superproject(tmp_path / "super", upstream, patches=[("b.patch", b)], tag="v2")
    before = tree_state(root)
    assert rebase_cli(root, "--to", "v1") == 1
    err = capsys.readouterr().err
    assert "moves the pin backwards" in err and "--allow-backwards" in err
    assert tree_state(root) == before
    assert rebase_cli(root, "--to", "v1", "--dry-run") == 0
    assert "moves the pin backwards" in capsys.readouterr().out
    assert rebase_cli(root, "--to", "v1", "--allow-backwards") == 0
    assert "moves the pin backwards" in capsys.readouterr().out
    assert run(["ls-files", "-s", "3rdparty/Up"], root).split()[1] == run(
        ["rev-parse", "v1"], upstream
    )


def test_standin_commit_is_deterministic(tmp_path: Path, upstream: Path) -> None:
    from tools.patchtool.model.manifest import load_manifest
    from tools.patchtool.source.standin import materialise_commit

    root = make_superproject(tmp_path / "super", upstream, standin=STANDIN)
    up = load_manifest(root).upstreams["Up"]
    shas = []
    for name in ("s1", "s2"):
        scratch = tmp_path / name
        create_scratch(scratch, [])
        shas.append(materialise_commit(scratch, root, up, "1", zip_downloader(upstream)))
    assert shas[0] == shas[1]
    # Same files as the tag: blob ids of the stand-in equal upstream's (3-way needs them).
    assert run(["rev-parse", f"{shas[0]}:pkg/mod.py"], tmp_path / "s1") == run(
        ["rev-parse", "v1:pkg/mod.py"], upstream
    )


# --- the real Megatron-LM series on the megatron-core 0.17.0 release stand-in -----------------

REPO_ROOT = Path(__file__).resolve().parents[3]


def _superproject_rev_pinned_at(tag: str) -> str | None:
    """The last commit of this repository whose manifest pinned Megatron-LM at `tag`."""
    log = subprocess.run(
        ["git", "log", "--format=%H", "-S", f'tag = "{tag}"', "--", "patches/upstreams.toml"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    if not log:
        return None
    manifest = subprocess.run(
        ["git", "show", f"{log[0]}:patches/upstreams.toml"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return log[0] if f'tag = "{tag}"' in manifest else f"{log[0]}^"


@pytest.mark.slow
def test_real_megatron_series_onto_core_0_17_0_standin(tmp_path: Path) -> None:
    """DDP still needed; unified-memory and tokenizer found upstreamed (#3390, core 0.17.0).

    Offline form of the real rebase: release archives only, no upstream history, no hint
    from the patches' own Upstream-Status (stand-ins cannot check it).
    """
    from tools.patchtool.model.series import parse_patch, read_series
    from tools.patchtool.rebase.bases import STANDIN as STANDIN_MODE
    from tools.patchtool.rebase.result import KEPT

    root = tmp_path / "root"
    rev = _superproject_rev_pinned_at("core_v0.16.1")
    if rev is None:
        pytest.skip(
            "no commit of this repository pins Megatron-LM at core_v0.16.1 (shallow clone?)"
        )
    root.mkdir()
    archive = subprocess.run(
        ["git", "archive", rev, "patches"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "x", "-C", str(root)], input=archive, check=True)
    series_dir = root / "patches/Megatron-LM"
    entries = read_series(series_dir / "series")
    cache = REPO_ROOT / ".cache/standins"
    have = all((cache / f"megatron-core-{v}").is_dir() for v in ("0.16.1", "0.17.0"))
    if not have and not pypi_reachable():
        pytest.skip("pypi.org unreachable and no cached megatron-core 0.16.1/0.17.0 archives")
    cache.mkdir(parents=True, exist_ok=True)
    (root / ".cache").symlink_to(REPO_ROOT / ".cache")  # share downloaded archives
    result, report, written = run_rebase(
        root, "Megatron-LM", "core_v0.17.0", dry_run=True, mode=STANDIN_MODE,
        scratch=tmp_path / "scratch",
    )  # fmt: skip
    assert written == [] and not result.new.history
    touched = {
        e.name: {f.path.rsplit("/", 1)[-1] for f in parse_patch(series_dir / e.name).files}
        for e in entries
    }
    got = {p.name: p for p in result.patches}
    for name, files in touched.items():
        res = got[name]
        if "distributed_data_parallel.py" in files:
            assert res.classification in KEPT, (name, res.classification, res.note)
        if files & {"unified_memory.py", "huggingface_tokenizer.py"}:
            assert res.classification == UPSTREAMED, (name, res.classification)
            assert {e.kind for e in res.evidence} <= {"reverse", "merge-noop"}
    assert sum(p.classification == UPSTREAMED for p in result.patches) == 2
    assert "megatron-core 0.17.0 stand-in" in report.read_text()
