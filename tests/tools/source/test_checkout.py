"""source/checkout.py: the state patchtool keeps in a checkout, decided in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.repos import (
    commit,
    init_repo,
    make_patch,
    make_superproject,
    numbered,
    run,
    trailers,
)
from tools.patchtool.apply.apply import apply_upstream
from tools.patchtool.git.git import git_text
from tools.patchtool.model.manifest import load_manifest
from tools.patchtool.source.checkout import (
    APPLIED_REF,
    BRANCH_REF,
    STANDIN_KEY,
    checkout_dir,
    head_of,
    is_applied,
    is_real_clone,
    move_branch,
    record_applied,
    standin_spec,
)


@pytest.fixture
def root(tmp_path: Path, isolated_git: None) -> Path:
    upstream = tmp_path / "upstream"
    init_repo(upstream, {"mod.py": numbered(5)})
    patch = make_patch(
        upstream, "v1", {"mod.py": ["line 1", "line 2", "3!"]}, "Fix three", trailers()
    )
    return make_superproject(tmp_path / "super", upstream, patches=[("0001-fix.patch", patch)])


def _digest(repo: Path) -> str:
    return git_text(["config", "--get", "patchtool.digest"], repo)


def test_applied_until_head_or_digest_moves(root: Path) -> None:
    up = load_manifest(root).upstreams["Up"]
    apply_upstream(root, up)
    repo = checkout_dir(root, up)
    digest = _digest(repo)
    assert head_of(repo) == (BRANCH_REF, run(["rev-parse", APPLIED_REF], repo))
    assert is_applied(repo, digest)
    assert not is_applied(repo, "")
    assert not is_applied(repo, "other digest")
    (repo / "mod.py").write_text("dirty\n")  # uncommitted changes are apply's no-op concern
    assert is_applied(repo, digest)
    run(["checkout", "-q", "--", "mod.py"], repo)
    run(["checkout", "-q", "--detach"], repo)
    assert head_of(repo)[0] == ""
    assert not is_applied(repo, digest)


def test_move_branch_keeps_the_applied_series_recognised(root: Path) -> None:
    up = load_manifest(root).upstreams["Up"]
    apply_upstream(root, up)
    repo = checkout_dir(root, up)
    tip = run(["rev-parse", BRANCH_REF], repo)
    run(["commit", "-q", "--amend", "-m", "Fix three (reworded)"], repo)
    new_tip = run(["rev-parse", "HEAD"], repo)
    run(["update-ref", BRANCH_REF, tip], repo)  # the branch as apply left it
    assert move_branch(repo, new_tip, tip, "test")
    assert run(["rev-parse", BRANCH_REF], repo) == run(["rev-parse", APPLIED_REF], repo) == new_tip
    record_applied(repo, "new digest")
    assert is_applied(repo, "new digest")
    commit(repo, "a commit apply did not make", {"other.py": ["x"]})
    later = run(["rev-parse", "HEAD"], repo)  # the branch moved past what apply made
    assert not move_branch(repo, new_tip, later, "test")
    assert run(["rev-parse", BRANCH_REF], repo) == run(["rev-parse", APPLIED_REF], repo) == new_tip


def test_real_clone_versus_standin_versus_nothing(root: Path, tmp_path: Path) -> None:
    up = load_manifest(root).upstreams["Up"]
    repo = checkout_dir(root, up)
    assert is_real_clone(repo) and standin_spec(repo) == ""
    run(["config", STANDIN_KEY, "up==1.0"], repo)
    assert not is_real_clone(repo) and standin_spec(repo) == "up==1.0"
    assert not is_real_clone(tmp_path / "absent")
