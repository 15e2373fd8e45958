"""prs/diffs.py: fork points found in one batch, diffs aligned with their pairs, the cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.repos import commit, init_repo, run
from tools.patchtool.prs.diffs import (
    changed_names,
    fork_points,
    load_cache,
    patches,
    save_cache,
)

pytestmark = pytest.mark.usefixtures("isolated_git")


def test_fork_points(tmp_path: Path) -> None:
    up = tmp_path / "up"
    first = init_repo(up, {"a.py": ["a"]}, tag="")
    run(["checkout", "-q", "-b", "pr"], up)
    commit(up, "pr work", {"b.py": ["b"]})
    run(["checkout", "-q", "main"], up)
    second = commit(up, "main moves", {"a.py": ["a2"]})
    run(["checkout", "-q", "pr"], up)
    run(["merge", "-q", "-m", "merge main into the PR", "main"], up)
    merged_in = commit(up, "more pr work", {"b.py": ["b2"]})
    run(["checkout", "-q", "main"], up)
    on_main = commit(up, "on main", {"c.py": ["c"]})
    cache = load_cache(tmp_path, "Up")
    fork_points(up, [merged_in, on_main], ["refs/heads/main"], cache)
    assert cache["forks"][merged_in] == second  # the newest main commit it merged
    assert cache["forks"][on_main] == second  # no commits of its own: its first parent
    pairs = {merged_in: (second, merged_in), on_main: (second, on_main), first: (first, first)}
    changed_names(up, pairs, cache)
    assert cache["names"] == {merged_in: ["b.py"], on_main: ["c.py"], first: []}
    out = patches(up, pairs, {k: ["b.py", "c.py"] for k in pairs}, cache)
    assert out[first] == [] and "+b2" in out[merged_in] and "+c" in out[on_main]
    save_cache(tmp_path, "Up", cache, 0)
    again = load_cache(tmp_path, "Up")
    assert again["forks"] == cache["forks"] and again["diffs"] == cache["diffs"]


def test_an_unreadable_cache_is_empty(tmp_path: Path) -> None:
    path = tmp_path / ".cache/patchtool/prs/Up.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert load_cache(tmp_path, "Up") == {"forks": {}, "names": {}, "diffs": {}, "moves": {}}
