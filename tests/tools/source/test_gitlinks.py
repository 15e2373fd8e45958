"""source/gitlinks.py: the superproject's staged and committed gitlinks against the manifest pin."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.repos import init_repo, make_superproject, numbered, run
from tools.patchtool.model.manifest import load_manifest
from tools.patchtool.source.gitlinks import (
    committed_gitlink,
    committed_pin,
    gitlink_problems,
    staged_gitlink,
)


@pytest.fixture
def root(tmp_path: Path, isolated_git: None) -> Path:
    upstream = tmp_path / "upstream"
    init_repo(upstream, {"mod.py": numbered(3)})
    return make_superproject(tmp_path / "super", upstream)


def test_pinned_gitlink_has_no_problem(root: Path) -> None:
    up = load_manifest(root).upstreams["Up"]
    assert staged_gitlink(root, up) == up.commit
    assert committed_gitlink(root, up) == up.commit
    assert committed_pin(root, up) == up.commit
    assert gitlink_problems(root, up) == []


def test_staged_gitlink_off_the_pin_is_reported_with_the_fix(root: Path) -> None:
    up = load_manifest(root).upstreams["Up"]
    other = "1" * 40
    run(["update-index", "--cacheinfo", f"160000,{other},{up.path}"], root)
    assert staged_gitlink(root, up) == other
    [problem] = gitlink_problems(root, up)
    assert f"staged gitlink {up.path} is {other[:12]}" in problem
    assert f"git restore --staged {up.path}" in problem


def test_committed_gitlink_off_heads_manifest_is_reported(root: Path) -> None:
    up = load_manifest(root).upstreams["Up"]
    other = "2" * 40
    run(["update-index", "--cacheinfo", f"160000,{other},{up.path}"], root)
    run(["commit", "-q", "-m", "move the gitlink by hand"], root)
    run(["update-index", "--cacheinfo", f"160000,{up.commit},{up.path}"], root)
    [problem] = gitlink_problems(root, up)
    assert f"committed gitlink {up.path} in HEAD is {other[:12]}" in problem
    assert "amend the commit" in problem


def test_no_gitlink_and_no_head_read_as_empty(tmp_path: Path, isolated_git: None) -> None:
    upstream = tmp_path / "upstream"
    init_repo(upstream, {"mod.py": numbered(3)})
    root = make_superproject(tmp_path / "super", upstream)
    up = load_manifest(root).upstreams["Up"]
    run(["rm", "-q", "--cached", up.path], root)
    assert staged_gitlink(root, up) == ""
    bare = tmp_path / "bare"
    bare.mkdir()
    run(["init", "-q"], bare)
    assert committed_gitlink(bare, up) == ""
    assert committed_pin(bare, up) == ""
