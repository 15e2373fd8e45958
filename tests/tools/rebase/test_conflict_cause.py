"""conflict_cause: which upstream commit moved the lines a conflicting patch needs (issue 58)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.repos import commit, init_repo, make_patch, numbered, run, trailers
from tools.patchtool.rebase.conflict_cause import (
    LACKS,
    MOVED_BY,
    conflict_causes,
    preimages,
    repo_with,
)

pytestmark = pytest.mark.usefixtures("isolated_git")

MBOX = "From " + "0" * 40 + " Mon Sep 17 00:00:00 2001\nSubject: [PATCH] fix\n\nWhy.\n---\n"


@pytest.fixture
def histories(tmp_path: Path) -> dict[str, str]:
    """base: lib.py and other.py; `pin` (main) adds a helper line after line 10 of lib.py;
    `dev` branches from base, rewrites line 25 and touches other.py."""
    repo = tmp_path / "up"
    base = init_repo(repo, {"lib.py": numbered(40), "other.py": numbered(10, "other")})
    with_helper = [*numbered(40)[:10], "helper from main", *numbered(40)[10:]]
    pin = commit(repo, "main adds a helper", {"lib.py": with_helper})
    run(["checkout", "-q", "-b", "dev", base], repo)
    rewritten = numbered(40)
    rewritten[24] = "dev rewrote 25"
    moved = commit(repo, "dev rewrites line 25", {"lib.py": rewritten})
    unrelated = commit(repo, "dev touches other", {"other.py": numbered(11, "other")})
    run(["checkout", "-q", "main"], repo)
    return {"pin": pin, "dev": unrelated, "moved": moved, "repo": str(repo)}


def _patch(repo: Path, pin: str, lines: list[str]) -> str:
    return make_patch(repo, pin, {"lib.py": lines}, "fix", trailers()).decode()


def test_a_rewritten_line_names_the_commit_only_the_new_base_has(
    histories: dict[str, str],
) -> None:
    repo = Path(histories["repo"])
    fixed = [*numbered(40)[:10], "helper from main", *numbered(40)[10:]]
    fixed[25] = "fixed 25"  # line 25 of the old base is index 25 after the helper
    (cause,) = conflict_causes(
        repo, histories["pin"], histories["dev"], _patch(repo, histories["pin"], fixed)
    )
    assert (cause.kind, cause.commit, cause.path) == (MOVED_BY, histories["moved"], "lib.py")
    assert cause.text().startswith(f"moved by {histories['moved'][:12]} (")
    assert cause.text().endswith(") dev rewrites line 25")


def test_lines_only_the_pin_has_name_the_commit_the_new_base_lacks(
    histories: dict[str, str],
) -> None:
    repo = Path(histories["repo"])
    fixed = [*numbered(40)[:10], "helper from main", "fixed 11", *numbered(40)[11:]]
    (cause,) = conflict_causes(
        repo, histories["pin"], histories["dev"], _patch(repo, histories["pin"], fixed)
    )
    assert (cause.kind, cause.subject) == (LACKS, "main adds a helper")


def test_a_hunk_that_still_applies_or_another_file_names_nothing(
    histories: dict[str, str],
) -> None:
    repo = Path(histories["repo"])
    fixed = [*numbered(40)[:10], "helper from main", *numbered(40)[10:]]
    fixed[35] = "fixed 35"  # dev left lines 33-38 alone: this hunk applies there
    text = _patch(repo, histories["pin"], fixed)
    assert conflict_causes(repo, histories["pin"], histories["dev"], text) == []
    fixed[25] = "fixed 25"
    text = _patch(repo, histories["pin"], fixed)
    assert conflict_causes(repo, histories["pin"], histories["dev"], text, ["other.py"]) == []
    assert len(conflict_causes(repo, histories["pin"], histories["dev"], text, ["lib.py"])) == 1


def test_lines_an_earlier_patch_wrote_are_not_blamed_on_upstream(
    histories: dict[str, str],
) -> None:
    """A hunk whose old side the pin's file does not have stands on an earlier patch."""
    repo = Path(histories["repo"])
    text = MBOX + "\n".join(
        [
            "diff --git a/lib.py b/lib.py",
            "--- a/lib.py",
            "+++ b/lib.py",
            "@@ -1,2 +1,2 @@",
            " written by an earlier patch",
            "-line 2",
            "+fixed 2",
            "",
        ]
    )
    assert preimages(text) == [("lib.py", ("written by an earlier patch", "line 2"))]
    assert conflict_causes(repo, histories["pin"], histories["dev"], text) == []


def test_preimages_read_each_hunks_old_side() -> None:
    text = MBOX + "\n".join(
        [
            "diff --git a/a.py b/a.py",
            "--- a/a.py",
            "+++ b/a.py",
            "@@ -3,3 +3,3 @@ def f():",
            " keep",
            "-old",
            "+new",
            " tail",
            "diff --git a/b.py b/b.py",
            "--- a/b.py",
            "+++ b/b.py",
            "@@ -7 +7,2 @@",
            " only",
            "+added",
            "\\ No newline at end of file",
        ]
    )
    assert preimages(text) == [("a.py", ("keep", "old", "tail")), ("b.py", ("only",))]


def test_repo_with_picks_a_history_holding_both_commits(
    histories: dict[str, str], tmp_path: Path
) -> None:
    repo = Path(histories["repo"])
    other = tmp_path / "other"
    init_repo(other, {"x.py": ["x"]})
    assert repo_with([other, repo], histories["pin"], histories["dev"]) == repo
    assert repo_with([other], histories["pin"]) is None
