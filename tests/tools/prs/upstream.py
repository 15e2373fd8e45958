"""A synthetic upstream with pull request refs, one PR of each kind `prs` tells apart.

Why one scenario: every verdict and state is read against the same pin and series, so a test
sees one PR change category without another hiding it. `A` is 60 numbered lines; the series'
one patch changes line 20 (and adds a test); after the pin, main gains a commit and the feeder
`dev` five lines at the top of `A`.
"""

from __future__ import annotations

from pathlib import Path

from tests.tools.repos import commit, init_repo, make_patch, make_superproject, numbered, run

A = "src/a.py"
FIX = "x = fixed(20)"


def lines_with(changes: dict[int, str], top: list[str] | None = None) -> list[str]:
    """A's lines with line n (1-based) replaced by changes[n], `top` lines put before them."""
    out = numbered(60)
    for n, text in changes.items():
        out[n - 1] = text
    return (top or []) + out


def pull(repo: Path, number: int, base: str, files: dict[str, list[str]], merge_ref: bool) -> str:
    """PR `number`: one commit on `base` changing `files`, as refs/pull/N/head (and /merge)."""
    run(["checkout", "-q", "--detach", base], repo)
    head = commit(repo, f"pr {number}", files)
    run(["update-ref", f"refs/pull/{number}/head", head], repo)
    if merge_ref:
        run(["update-ref", f"refs/pull/{number}/merge", head], repo)
    run(["checkout", "-q", "main"], repo)
    return head


def build(tmp: Path) -> tuple[Path, Path]:
    """(superproject, upstream) with PRs 1-8 (see the test module for each one's role)."""
    up = tmp / "up"
    init_repo(up, {A: numbered(60), "src/b.py": numbered(5)}, tag="")
    pull(up, 8, "main", {"src/b.py": ["early fix", *numbered(5)[1:]]}, False)
    run(["merge", "-q", "--ff-only", "refs/pull/8/head"], up)  # merged before the pin
    run(["tag", "v1"], up)
    patch = make_patch(
        up,
        "v1",
        {A: lines_with({20: FIX}), "tests/test_a.py": ["def test_fix():", "    assert 1"]},
        "fix line 20",
        ["Upstream-Status: pending", "Origin: mcore-rl-stack", "Test: tests/test_a.py::test_fix"],
    )
    pull(up, 1, "v1", {A: lines_with({20: FIX})}, True)  # same fix, open
    pull(up, 2, "v1", {A: lines_with({20: "x = other(20)"})}, True)  # conflicts, open
    pull(up, 3, "v1", {A: lines_with({26: "line 26 changed"})}, True)  # nearby
    pull(up, 5, "v1", {A: lines_with({19: "y = 19"})}, False)  # closed: no merge ref
    giant = {f"src/g{i}.py": ["g"] for i in range(5)}
    pull(up, 6, "v1", {**giant, A: lines_with({20: "x = giant(20)"})}, True)
    pr4 = pull(up, 4, "v1", {A: lines_with({21: "z = 21"})}, False)
    run(["cherry-pick", pr4], up)  # squashed onto main after the pin
    run(["commit", "-q", "--amend", "-m", "change 21 (#4)"], up)
    run(["checkout", "-q", "-b", "dev"], up)
    commit(up, "dev moves A down", {A: [f"top {i}" for i in range(5)] + lines_with({21: "z = 21"})})
    # aimed at the feeder: dev's line 25 is the pin's line 20
    pull(
        up,
        7,
        "dev",
        {A: [f"top {i}" for i in range(5)] + lines_with({20: "w = 20", 21: "z = 21"})},
        True,
    )
    run(["checkout", "-q", "main"], up)
    root = make_superproject(
        tmp / "super", up, patches=[("fix-line-20.patch", patch)], standin='feeder = "dev"\n'
    )
    run(
        ["fetch", "-q", "origin", "+refs/pull/*:refs/pull/*", "+refs/heads/*:refs/heads/*"],
        root / "3rdparty" / "Up",
        check=False,
    )
    return root, up
