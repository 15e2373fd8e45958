"""What a git directory knows of upstream's pull requests: the `refs/pull/N/head` and
`/merge` refs, the branches PRs target, and each PR's state with how sure it is.

Why several sources: a PR merged by a merge commit is an ancestor of its branch; a squashed one
only leaves `(#N)` in a subject on main or the feeder; GitHub keeps `refs/pull/N/merge` for
open PRs but closed ones may keep it too, so only `gh pr list --json` output is sure of
open/closed (`--gh-json`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import git, git_text

# Branches a PR may target: main, the feeder (given), release branches (Megatron's core_r0.18.0,
# core_dev_r0.16.0, r0.4.0, release-v1.2, v0.3.x ...).
_TARGET_RE = re.compile(
    r"^(main|master|dev|develop|(core_)?(dev_)?r\d[\w.]*|release[-/_]?v?\d[\w.-]*|v\d+\.\d+[\w.-]*)$"
)
_SUBJECT_RE = re.compile(r"\(#(\d+)\)\s*$|^Merge pull request #(\d+) ")
_REF_RE = re.compile(r"^([0-9a-f]{40,64}) refs/pull/(\d+)/(head|merge)$")

MERGED, OPEN, CLOSED = "merged", "open", "closed"


@dataclass(frozen=True)
class PullRef:
    number: int
    head: str
    merge_ref: bool  # refs/pull/N/merge exists


@dataclass
class History:
    """The sets the states are read from (commit ids)."""

    main: str  # the main branch's ref name
    feeder: str
    targets: list[str]  # every branch a PR may target (full ref names)
    main_commits: set[str] = field(default_factory=set)  # reachable from main
    mainline: set[str] = field(default_factory=set)  # reachable from main or the feeder
    pinned: set[str] = field(default_factory=set)  # reachable from the pin
    squashed: dict[int, str] = field(default_factory=dict)  # PR -> its (#N) commit


@dataclass(frozen=True)
class State:
    """A PR's state, how it is known, and whether the pin already has it."""

    state: str
    how: str
    sure: bool
    in_pin: bool = False

    def text(self) -> str:
        return f"{self.state}{'' if self.sure else '?'} ({self.how})"


def pull_refs(gitdir: Path) -> dict[int, PullRef]:
    """Every PR of `gitdir` that has a head ref, by number."""
    out = git(["for-each-ref", "--format=%(objectname) %(refname)", "refs/pull/"], gitdir)
    heads: dict[int, str] = {}
    merges: set[int] = set()
    for line in out.splitlines():
        if m := _REF_RE.match(line):
            if m.group(3) == "head":
                heads[int(m.group(2))] = m.group(1)
            else:
                merges.add(int(m.group(2)))
    return {n: PullRef(n, sha, n in merges) for n, sha in heads.items()}


def target_branches(gitdir: Path, feeder: str) -> list[str]:
    """Full names of the branches PRs target (local branches, else origin's)."""
    out = git(
        ["for-each-ref", "--format=%(refname)", "refs/heads/", "refs/remotes/origin/"], gitdir
    )
    by_short: dict[str, str] = {}
    for ref in out.splitlines():
        short = ref.removeprefix("refs/heads/").removeprefix("refs/remotes/origin/")
        if short == "HEAD" or not (_TARGET_RE.match(short) or short == feeder):
            continue
        by_short.setdefault(short, ref)  # refs/heads sorts first
    return sorted(by_short.values())


def load_history(gitdir: Path, pin: str, feeder: str) -> History:
    """Mainline and pin ancestry and the `(#N)` subjects of `gitdir`; an error naming the fix when
    it lacks the pin or a main branch."""
    if not git_text(["rev-parse", "-q", "--verify", f"{pin}^{{commit}}"], gitdir, check=False):
        raise PatchToolError(
            f"{gitdir} does not have the pin {pin[:12]}; fetch the upstream's branches into it "
            "(git fetch origin) or pass --from a clone that has them"
        )
    targets = target_branches(gitdir, feeder)
    short = {t.rsplit("/", 1)[-1] if t.startswith("refs/remotes/") else t[11:]: t for t in targets}
    main = short.get("main") or short.get("master") or ""
    if not main:
        raise PatchToolError(f"{gitdir} has no main branch (refs/heads/main or origin/main)")
    lines = [main] + ([short[feeder]] if feeder in short else [])
    history = History(main, short.get(feeder, ""), targets)
    history.main_commits = set(git(["rev-list", main], gitdir).split())
    history.mainline = set(history.main_commits)
    if history.feeder:
        history.mainline.update(git(["rev-list", history.feeder, "--not", main], gitdir).split())
    history.pinned = set(git(["rev-list", pin], gitdir).split())
    log = git(["log", "--format=%H %s", *lines], gitdir)
    for line in log.splitlines():
        sha, _, subject = line.partition(" ")
        if m := _SUBJECT_RE.search(subject):
            history.squashed.setdefault(int(m.group(1) or m.group(2)), sha)
    return history


def read_gh_json(path: Path) -> dict[int, str]:
    """PR -> state from `gh pr list --state all --json number,state` output."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {int(item["number"]): str(item["state"]).lower() for item in data}
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise PatchToolError(
            f"--gh-json {path}: {exc.__class__.__name__}: {exc}; write it with "
            f"`gh pr list --state all --limit 20000 --json number,state > {path}`"
        ) from None


def state_of(ref: PullRef, history: History, gh: dict[int, str]) -> State:
    """The PR's state: ancestry or a `(#N)` subject say merged (sure), `gh` output is sure of
    open/closed, a /merge ref alone makes it likely open, none likely closed."""
    squash = history.squashed.get(ref.number, "")
    if ref.head in history.mainline:
        return State(MERGED, "head on main", True, ref.head in history.pinned)
    if squash:
        return State(MERGED, f"(#{ref.number}) on main", True, squash in history.pinned)
    if ref.number in gh:
        state = gh[ref.number]
        return State(state, "gh", True)
    if ref.merge_ref:
        return State(OPEN, "merge ref", False)
    return State(CLOSED, "no merge ref", False)
