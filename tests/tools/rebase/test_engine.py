"""rebase/engine.py: classification on generated upstreams, one scenario per class and evidence."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.rebase.scenario import MOD, classes, fixed, kinds, replay, series_of
from tests.tools.repos import (
    commit,
    make_patch,
    numbered,
    run,
    trailers,
)
from tools.patchtool.rebase.result import CLEAN, CONFLICT, MERGED_3WAY, OFFSET, UPSTREAMED

pytestmark = pytest.mark.usefixtures("isolated_git")


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
