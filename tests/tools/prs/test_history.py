"""prs/history.py: PR refs, target branches, states and how sure they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.repos import commit, init_repo, run
from tools.patchtool.errors import PatchToolError
from tools.patchtool.prs.history import (
    PullRef,
    load_history,
    pull_refs,
    read_gh_json,
    state_of,
    target_branches,
)

pytestmark = pytest.mark.usefixtures("isolated_git")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """main: initial, pin, then a merge of PR 3 (merge commit) and a squash of PR 4."""
    up = tmp_path / "up"
    init_repo(up, {"a.py": ["a"]}, tag="")
    commit(up, "pin", {"a.py": ["pin"]})
    run(["tag", "pin"], up)
    for branch in ("dev", "core_r0.1.0", "release-v1.2", "alice/feature"):
        run(["branch", branch], up)
    run(["checkout", "-q", "-b", "pr3"], up)
    pr3 = commit(up, "pr 3", {"b.py": ["b"]})
    run(["checkout", "-q", "main"], up)
    run(["merge", "-q", "--no-ff", "-m", "Merge pull request #3 from x/pr3", "pr3"], up)
    commit(up, "fix c (#4)", {"c.py": ["c"]})
    run(["update-ref", "refs/pull/3/head", pr3], up)
    run(["update-ref", "refs/pull/4/head", "pin"], up)  # any head: the subject decides
    run(["update-ref", "refs/pull/5/head", "pin"], up)
    run(["update-ref", "refs/pull/5/merge", "pin"], up)
    return up


def test_targets_are_main_feeder_and_release_branches(repo: Path) -> None:
    assert target_branches(repo, "dev") == [
        "refs/heads/core_r0.1.0",
        "refs/heads/dev",
        "refs/heads/main",
        "refs/heads/release-v1.2",
    ]


def test_states_and_how_sure(repo: Path) -> None:
    refs = pull_refs(repo)
    assert sorted(refs) == [3, 4, 5] and refs[5].merge_ref and not refs[3].merge_ref
    history = load_history(repo, run(["rev-parse", "pin"], repo), "dev")
    s3 = state_of(refs[3], history, {})
    assert (s3.state, s3.how, s3.sure, s3.in_pin) == ("merged", "head on main", True, False)
    s4 = state_of(PullRef(4, "0" * 40, False), history, {})
    assert (s4.state, s4.how, s4.sure) == ("merged", "(#4) on main", True)
    assert state_of(refs[5], history, {}).text() == "merged (head on main)"  # its head is the pin
    unmerged = PullRef(9, "1" * 40, True)
    assert state_of(unmerged, history, {}).text() == "open? (merge ref)"
    assert state_of(unmerged, history, {9: "closed"}).text() == "closed (gh)"
    assert state_of(PullRef(9, "1" * 40, False), history, {}).text() == "closed? (no merge ref)"


def test_errors_name_the_fix(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(PatchToolError, match="does not have the pin 000000000000; fetch"):
        load_history(repo, "0" * 40, "dev")
    bad = tmp_path / "gh.json"
    bad.write_text('[{"number": 1}]')
    with pytest.raises(PatchToolError, match="gh pr list --state all"):
        read_gh_json(bad)
    bad.write_text('[{"number": 1, "state": "MERGED"}]')
    assert read_gh_json(bad) == {1: "merged"}
