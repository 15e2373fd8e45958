"""`prs` for one upstream: every patch of the series with the PRs on its lines, ranked.

Why this shape: the series is small (tens of patches, a few dozen files) and the PRs many, so
PRs are filtered by the files they change before any line is compared; PRs the pin already
has (merged before it) are left out; PRs over `max_files` are counted per patch, never listed
(a tree-wide rename touches every patch and says nothing about any).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PatchToolError
from ..model.manifest import Upstream, load_manifest
from ..model.series import load_series
from . import diffs
from .history import (
    CLOSED,
    MERGED,
    OPEN,
    History,
    PullRef,
    State,
    load_history,
    pull_refs,
    read_gh_json,
)
from .history import state_of as _state_of
from .lines import (
    CONFLICTS,
    NEAR,
    NEARBY,
    SAME_FIX,
    VERDICT_RANK,
    FileChanges,
    Likeness,
    onto_pin,
    parse_diff,
    verdict,
)

MAX_FILES = 300
_STATE_RANK = {OPEN: 0, MERGED: 1, CLOSED: 2}
_PULL_RE = re.compile(r"(?:/pull/|#)(\d+)\b")  # a PR link or #N in the message


@dataclass(frozen=True)
class Hit:
    """One PR on one patch's lines."""

    number: int
    state: State
    verdict: str
    like: Likeness  # how much of our change (outside tests) the PR makes too
    files: int  # files the PR changes
    target: str  # the branch its fork point is on
    named: bool  # the patch already names it (a link in its message)

    def rank(self) -> tuple[int, int, float, int]:
        return (
            VERDICT_RANK[self.verdict],
            _STATE_RANK.get(self.state.state, 3),
            -self.like.lines,
            -self.number,
        )


@dataclass
class PatchPrs:
    name: str
    hits: list[Hit] = field(default_factory=list)
    giant: list[int] = field(default_factory=list)  # PRs over max_files on its files


@dataclass
class Scan:
    upstream: str
    gitdir: str
    pin: str
    heads: int
    merge_refs: int
    in_pin: int  # PRs the pin already has (left out)
    giant: int  # PRs over max_files
    max_files: int
    patches: list[PatchPrs]
    seconds: float = 0.0
    cached: int = 0  # heads whose fork point came from the cache


def default_gitdir(root: Path, up: Upstream) -> Path:
    """The upstream's checkout, whose clone may hold fetched `refs/pull/*`."""
    return root / up.path


def run_scan(root: Path, upstream: str, gitdir: str, gh_json: str, **kw: int) -> Scan:
    """The scan of upstream `upstream` that --from / --gh-json ask for (prs, open-pr, report)."""
    up = load_manifest(root).select([upstream])[0]
    where = Path(gitdir).resolve() if gitdir else default_gitdir(root, up)
    if not where.exists():
        raise PatchToolError(f"--from {where}: no such directory; pass a git dir with refs/pull/*")
    gh = read_gh_json(Path(gh_json)) if gh_json else {}
    return scan(root, up, where, gh, **kw)


def counts(result: Scan) -> dict[str, int]:
    """Patches with at least one same-fix / conflicting / nearby PR (by their best verdict)."""
    out = {SAME_FIX: 0, CONFLICTS: 0, NEARBY: 0}
    for patch in result.patches:
        if patch.hits:
            out[patch.hits[0].verdict] += 1
    return out


def cell(patch: PatchPrs, shown: int = 3) -> str:
    """The status page's cell: same-fix and conflicting PRs that are open or merged after the
    pin (closed ones no longer matter), best first; "" when none."""
    picked = [h for h in patch.hits if h.verdict != NEARBY and h.state.state != CLOSED]
    parts = [
        f"{h.verdict} #{h.number} {h.state.state}{'' if h.state.sure else '?'}"
        for h in picked[:shown]
    ]
    more = f" (+{len(picked) - shown} more)" if len(picked) > shown else ""
    return "; ".join(parts) + more


def _series(root: Path, up: Upstream) -> list[tuple[str, FileChanges, set[int]]]:
    """(patch name, its changes at the pin, PR numbers its message links) per patch."""
    out = []
    for entry, patch in load_series(root / up.series_dir):
        text = patch.path.read_text(encoding="utf-8", errors="replace")
        message = text.split("\ndiff --git ", 1)[0]
        named = {int(n) for n in _PULL_RE.findall(message)}
        out.append((entry.name, parse_diff(text.splitlines()), named))
    return out


def _target(fork: str, history: History) -> str:
    if fork in history.main_commits:
        return "main"
    return history.feeder.rsplit("/", 1)[-1] if fork in history.mainline else "release"


def scan(
    root: Path,
    up: Upstream,
    gitdir: Path,
    gh: dict[int, str],
    max_files: int = MAX_FILES,
    near: int = NEAR,
) -> Scan:
    """The PRs of `gitdir` on each patch of `up`'s series."""
    started = time.monotonic()
    refs = pull_refs(gitdir)
    if not refs:
        raise PatchToolError(
            f"{gitdir} has no refs/pull/*/head; fetch them there with git fetch origin "
            "'+refs/pull/*/head:refs/pull/*/head' '+refs/pull/*/merge:refs/pull/*/merge', "
            "or pass --from a git dir that has them"
        )
    history = load_history(gitdir, up.commit, up.feeder)
    states = {n: _state_of(r, history, gh) for n, r in refs.items()}
    live = {n: r for n, r in refs.items() if not states[n].in_pin}
    cache = diffs.load_cache(root, up.name)
    size = diffs.cache_size(cache)
    cached = sum(r.head in cache["forks"] for r in live.values())
    diffs.fork_points(gitdir, [r.head for r in live.values()], history.targets, cache)
    pairs = {r.head: (cache["forks"][r.head], r.head) for r in live.values()}
    diffs.changed_names(gitdir, pairs, cache)
    series = _series(root, up)
    result = Scan(
        up.name,
        str(gitdir),
        up.commit,
        len(refs),
        sum(r.merge_ref for r in refs.values()),
        len(refs) - len(live),
        0,
        max_files,
        [PatchPrs(name) for name, _, _ in series],
    )
    hits = _compare(gitdir, up.commit, live, series, pairs, cache, result, near)
    for number, patch_index, verdict_, like in hits:
        ref = live[number]
        fork = pairs[ref.head][0]
        result.patches[patch_index].hits.append(
            Hit(
                number,
                states[number],
                verdict_,
                like,
                len(cache["names"][ref.head]),
                _target(fork, history),
                number in series[patch_index][2],
            )
        )
    for patch in result.patches:
        patch.hits.sort(key=Hit.rank)
    diffs.save_cache(root, up.name, cache, size)
    result.seconds, result.cached = time.monotonic() - started, cached
    return result


def _compare(
    gitdir: Path,
    pin: str,
    live: dict[int, PullRef],
    series: list[tuple[str, FileChanges, set[int]]],
    pairs: dict[str, tuple[str, str]],
    cache: diffs.Cache,
    result: Scan,
    near: int,
) -> list[tuple[int, int, str, Likeness]]:
    """(PR, patch index, verdict, likeness) of every PR on a patch's lines; giant PRs counted."""
    ours_paths = {p for _, changes, _ in series for p in changes}
    wanted: dict[str, list[str]] = {}
    for number, ref in live.items():
        names = cache["names"][ref.head]
        on_series = sorted(ours_paths.intersection(names))
        if len(names) > max(result.max_files, 0):
            result.giant += 1
            for index, (_, changes, _) in enumerate(series):
                if set(changes).intersection(names):
                    result.patches[index].giant.append(number)
        elif on_series:
            wanted[ref.head] = on_series
    theirs = diffs.patches(gitdir, {h: pairs[h] for h in wanted}, wanted, cache)
    forks: dict[str, set[str]] = {}
    for head, paths in wanted.items():
        forks.setdefault(pairs[head][0], set()).update(paths)
    moved_by_fork = diffs.moves(
        gitdir, {f: (f, pin) for f in forks}, {f: sorted(p) for f, p in forks.items()}, cache
    )
    by_head = {r.head: n for n, r in live.items()}
    out = []
    for head in wanted:
        fork = pairs[head][0]
        moved = moved_by_fork[fork]
        at_pin = {
            path: onto_pin(cs, moved.get(path, [])) for path, cs in parse_diff(theirs[head]).items()
        }
        for index, (_, ours, _) in enumerate(series):
            found, like = verdict(ours, at_pin, near)
            if found:
                out.append((by_head[head], index, found, like))
    return out
