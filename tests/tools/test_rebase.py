"""Rebase classification on generated upstreams: one scenario per class and evidence kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.repos import commit, init_repo, make_patch, numbered, run, trailers
from tools.patchtool.rebase import (
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
    assert classes(result) == {"a.patch": CONFLICT}
    assert any(n.startswith("patch-id") for n in result.patches[0].not_checked)


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
