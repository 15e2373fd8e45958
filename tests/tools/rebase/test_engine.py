"""Rebase classification on generated upstreams: one scenario per class and evidence kind."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.network import pypi_reachable
from tests.tools.repos import (
    commit,
    init_repo,
    make_patch,
    make_superproject,
    numbered,
    run,
    trailers,
    tree_state,
)
from tools.patchtool.cli import main
from tools.patchtool.core.manifest import Standin
from tools.patchtool.errors import PatchToolError
from tools.patchtool.rebase.engine import (
    CLEAN,
    CONFLICT,
    MERGED_3WAY,
    OFFSET,
    UPSTREAMED,
    Base,
    RebaseResult,
    create_scratch,
    rebase_series,
)
from tools.patchtool.rebase.flow import run_rebase

pytestmark = pytest.mark.usefixtures("isolated_git")


MOD = "pkg/mod.py"


def fixed(lines: list[str], index: int, text: str) -> list[str]:
    out = list(lines)
    out[index] = text
    return out


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    repo = tmp_path / "upstream"
    init_repo(repo, {MOD: numbered(40), "pkg/other.py": numbered(5, "other")})
    return repo


def series_of(upstream: Path, *changes: tuple[str, list[str]]) -> list[tuple[str, bytes]]:
    """Patches made independently on v1 (each a one-file change to MOD unless given)."""
    out = []
    for number, (name, lines) in enumerate(changes, 1):
        data = make_patch(upstream, "v1", {MOD: lines}, f"fix {number}: {name}", trailers())
        out.append((f"{name}.patch", data))
    return out


def replay(
    tmp_path: Path, upstream: Path, patches: list[tuple[str, bytes]], new_rev: str, **kw: object
) -> RebaseResult:
    scratch = tmp_path / "scratch"
    create_scratch(scratch, [upstream])
    old_sha = run(["rev-parse", "v1"], upstream)
    new_sha = run(["rev-parse", new_rev], upstream)
    history = bool(kw.pop("history", True))
    old = Base("v1", old_sha, history, old_sha, "v1")
    new = Base(new_rev, new_sha, history, new_sha, new_rev)
    return rebase_series("Up", patches, old, new, scratch, history_repos=[upstream], **kw)  # type: ignore[arg-type]


def classes(result: RebaseResult) -> dict[str, str]:
    return {p.name: p.classification for p in result.patches}


def kinds(result: RebaseResult, name: str) -> list[str]:
    return [e.kind for p in result.patches if p.name == name for e in p.evidence]


def test_clean_when_base_changes_elsewhere(tmp_path: Path, upstream: Path) -> None:
    patches = series_of(upstream, ("a", fixed(numbered(40), 20, "patched 21")))
    commit(upstream, "unrelated", {"pkg/other.py": numbered(6, "other")})
    run(["tag", "v2"], upstream)
    result = replay(tmp_path, upstream, patches, "v2")
    assert classes(result) == {"a.patch": CLEAN}
    assert result.patches[0].offsets == [] and result.patches[0].new_commit


def test_offset_when_lines_shift_but_context_is_exact(tmp_path: Path, upstream: Path) -> None:
    patches = series_of(upstream, ("a", fixed(numbered(40), 20, "patched 21")))
    commit(upstream, "insert header", {MOD: ["# new 1", "# new 2", "# new 3", *numbered(40)]})
    run(["tag", "v2"], upstream)
    result = replay(tmp_path, upstream, patches, "v2")
    assert classes(result) == {"a.patch": OFFSET}
    assert result.patches[0].offsets == [f"{MOD}: hunk #1 at line 21 (offset +3)"]


def test_merged_3way_when_context_changed_nearby(tmp_path: Path, upstream: Path) -> None:
    patches = series_of(upstream, ("a", fixed(numbered(40), 20, "patched 21")))
    # Upstream edits a context line two lines above ours: exact context fails, 3-way merges.
    commit(upstream, "nearby edit", {MOD: fixed(numbered(40), 18, "upstream 19")})
    run(["tag", "v2"], upstream)
    result = replay(tmp_path, upstream, patches, "v2")
    assert classes(result) == {"a.patch": MERGED_3WAY}
    res = result.patches[0]
    assert res.failed_files == [MOD]
    assert "+patched 21" in res.hunks and " upstream 19" in res.hunks
    merged = run(["show", f"{res.new_commit}:{MOD}"], Path(result.scratch)).splitlines()
    assert merged[18] == "upstream 19" and merged[20] == "patched 21"


def test_conflict_leaves_markers_and_classifies_the_rest(tmp_path: Path, upstream: Path) -> None:
    patches = series_of(
        upstream,
        ("a", fixed(numbered(40), 20, "patched 21")),
        ("b", fixed(numbered(40), 35, "patched 36")),
    )
    commit(upstream, "same line", {MOD: fixed(numbered(40), 20, "upstream 21")})
    run(["tag", "v2"], upstream)
    result = replay(tmp_path, upstream, patches, "v2")
    assert classes(result) == {"a.patch": CONFLICT, "b.patch": CLEAN}
    res = result.patches[0]
    assert res.conflict_files == [MOD]
    assert "<<<<<<<" in res.hunks
    text = (Path(result.scratch) / MOD).read_text()
    assert "<<<<<<<" in text and "patched 21" in text and "upstream 21" in text
    assert (Path(result.scratch) / ".git" / "rebase-apply").is_dir()
    flat = [" ".join(c) for c in result.finish_commands]
    assert flat[0] == f"cd {result.scratch}"
    assert f"git add -- {MOD}" in flat and "git am --continue" in flat


def test_upstreamed_by_reverse_apply(tmp_path: Path, upstream: Path) -> None:
    patches = series_of(upstream, ("a", fixed(numbered(40), 20, "patched 21")))
    # Upstream makes the same change inside a bigger commit: patch-id differs, post-image present.
    commit(
        upstream,
        "upstream fix plus more",
        {MOD: fixed(numbered(40), 20, "patched 21"), "pkg/other.py": numbered(7, "other")},
    )
    run(["tag", "v2"], upstream)
    result = replay(tmp_path, upstream, patches, "v2")
    assert classes(result) == {"a.patch": UPSTREAMED}
    assert kinds(result, "a.patch") == ["reverse"]


def test_upstreamed_by_patch_id(tmp_path: Path, upstream: Path) -> None:
    patches = series_of(upstream, ("a", fixed(numbered(40), 20, "patched 21")))
    run(["am", "-q"], upstream, input=patches[0][1])  # upstream takes our patch as is
    picked = run(["rev-parse", "HEAD"], upstream)
    # ... then edits the lines around it, so the patch no longer reverse-applies.
    lines = fixed(fixed(numbered(40), 20, "patched 21"), 19, "later 20")
    commit(upstream, "later edit", {MOD: lines})
    run(["tag", "v2"], upstream)
    result = replay(tmp_path, upstream, patches, "v2")
    assert classes(result) == {"a.patch": UPSTREAMED}
    assert kinds(result, "a.patch") == ["patch-id"]
    assert picked[:12] in result.patches[0].evidence[0].detail


def test_patch_id_not_checked_without_history(tmp_path: Path, upstream: Path) -> None:
    patches = series_of(upstream, ("a", fixed(numbered(40), 20, "patched 21")))
    run(["am", "-q"], upstream, input=patches[0][1])
    commit(upstream, "later edit", {MOD: fixed(fixed(numbered(40), 20, "patched 21"), 19, "x")})
    run(["tag", "v2"], upstream)
    result = replay(tmp_path, upstream, patches, "v2", history=False)
    assert any(n.startswith("patch-id") for n in result.patches[0].not_checked)
    # Upstream edited the line right next to ours: only patch-id could have told.
    assert classes(result) == {"a.patch": CONFLICT}


def test_upstreamed_by_merge_noop_when_context_moved_on(tmp_path: Path, upstream: Path) -> None:
    patches = series_of(upstream, ("a", fixed(numbered(40), 20, "patched 21")))
    # Upstream's own commit: same change, plus an edit inside our hunk's context.
    lines = fixed(fixed(numbered(40), 20, "patched 21"), 18, "upstream 19")
    commit(upstream, "upstream fix, reworded docs", {MOD: lines, "pkg/other.py": numbered(2)})
    run(["tag", "v2"], upstream)
    result = replay(tmp_path, upstream, patches, "v2")
    assert classes(result) == {"a.patch": UPSTREAMED}
    assert kinds(result, "a.patch") == ["merge-noop"]
    assert result.patches[0].new_commit == ""
    assert not (Path(result.scratch) / ".git" / "rebase-apply").exists()


def test_upstreamed_by_accepted_ancestor(tmp_path: Path, upstream: Path) -> None:
    # Upstream fixes it differently; our patch records the accepted commit.
    fix = commit(upstream, "upstream's own fix", {MOD: fixed(numbered(40), 20, "fixed 21")})
    run(["tag", "v2"], upstream)
    data = make_patch(
        upstream,
        "v1",
        {MOD: fixed(numbered(40), 20, "patched 21")},
        "fix: a",
        trailers(status=f"accepted {fix[:12]}"),
    )
    result = replay(tmp_path, upstream, [("a.patch", data)], "v2")
    assert classes(result) == {"a.patch": UPSTREAMED}
    assert kinds(result, "a.patch") == ["accepted"]
    assert "only the Upstream-Status trailer says so" in result.patches[0].note
    assert run(["rev-parse", "HEAD"], Path(result.scratch)) == run(["rev-parse", "v2"], upstream)


def test_accepted_trailer_is_confirmed_independently(tmp_path: Path, upstream: Path) -> None:
    lines = fixed(fixed(numbered(40), 20, "patched 21"), 18, "upstream 19")
    fix = commit(upstream, "upstream fix, context edited", {MOD: lines, "pkg/other.py": ["x"]})
    run(["tag", "v2"], upstream)
    data = make_patch(
        upstream, "v1", {MOD: fixed(numbered(40), 20, "patched 21")}, "fix: a",
        trailers(status=f"accepted {fix}"),
    )  # fmt: skip
    result = replay(tmp_path, upstream, [("a.patch", data)], "v2")
    assert kinds(result, "a.patch") == ["accepted", "merge-noop"]
    assert result.patches[0].note == ""


def test_upstreamed_by_tripwire_hook(tmp_path: Path, upstream: Path) -> None:
    patches = series_of(
        upstream,
        ("a", fixed(numbered(40), 20, "patched 21")),
        ("b", fixed(numbered(40), 35, "patched 36")),
    )
    commit(upstream, "upstream's own fix", {MOD: fixed(numbered(40), 20, "fixed 21")})
    run(["tag", "v2"], upstream)
    seen: list[tuple[str, str]] = []

    def hook(name: str, patch: object, tree: Path) -> bool | None:
        line = (tree / MOD).read_text().splitlines()[20]
        seen.append((name, line))
        return line == "fixed 21" and name == "a.patch"

    result = replay(tmp_path, upstream, patches, "v2", tripwire=hook)
    assert classes(result) == {"a.patch": UPSTREAMED, "b.patch": CLEAN}
    assert kinds(result, "a.patch") == ["tripwire"]
    assert (
        "tests/test_x.py::test_fix passes without the patch" in result.patches[0].evidence[0].detail
    )
    assert seen == [("a.patch", "fixed 21"), ("b.patch", "fixed 21")]


def test_later_patch_builds_on_earlier_one(tmp_path: Path, upstream: Path) -> None:
    """Patches are replayed in order: the second one's context contains the first one's change."""
    first = fixed(numbered(40), 20, "patched 21")
    a = make_patch(upstream, "v1", {MOD: first}, "fix a", trailers())
    run(["checkout", "-q", "--detach", "v1"], upstream)
    run(["am", "-q"], upstream, input=a)
    b = make_patch(upstream, "HEAD", {MOD: fixed(first, 21, "patched 22")}, "fix b", trailers())
    run(["checkout", "-q", "main"], upstream)
    commit(upstream, "insert header", {MOD: ["# new", *numbered(40)]})
    run(["tag", "v2"], upstream)
    result = replay(tmp_path, upstream, [("a.patch", a), ("b.patch", b)], "v2")
    assert classes(result) == {"a.patch": OFFSET, "b.patch": OFFSET}
    lines = result.range_diff.splitlines()
    assert [x.split()[2] for x in lines if x[:1].isdigit()] == ["=", "="], result.range_diff


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


def test_standin_commit_is_deterministic(tmp_path: Path, upstream: Path) -> None:
    from tools.patchtool.core.manifest import load_manifest
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
    from tools.patchtool.core.series import parse_patch, read_series
    from tools.patchtool.rebase.bases import STANDIN as STANDIN_MODE
    from tools.patchtool.rebase.engine import KEPT

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
