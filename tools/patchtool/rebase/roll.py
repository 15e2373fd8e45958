"""`roll`: move the three pins together to the newest coherent triple, or say why not.

NeMo-RL's commit nests a Megatron-Bridge commit, which nests a Megatron-LM commit: the three
pins only move together (`pin.follow_chain` reads the chain). Every series is replayed on its
member of the triple with the rebase engine, so each patch gets the classification `rebase`
gives (tripwires run on the upstreams that move, when the caller passes a hook). The pins move,
in one commit, only when every patch is clean, offset or upstreamed (retired with its
evidence, as `rebase` does); a conflict or a 3-way merge stops the roll with the report and
nothing outside the scratch directories changed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import git, git_text, run
from ..model.manifest import MANIFEST_PATH, Manifest, Upstream, load_manifest, short
from ..source.detect import probe_url
from .engine import TripwireHook
from .flow import REPORT_DIR, finish
from .pin import Planned, follow_chain, plan
from .report import markdown, summary
from .result import CLEAN, OFFSET, UPSTREAMED
from .scratch import remove_scratch

TOP = "NeMo-RL"  # the top of the chain: its commit names the other two
BRANCH = "main"
MOVABLE = (CLEAN, OFFSET, UPSTREAMED)
UP_TO_DATE, MOVE, STOP = "up-to-date", "move", "stop"

Progress = Callable[[str], None]


@dataclass
class RollPlan:
    """The triple a roll aims at, every series replayed on it, and what blocks the move."""

    target_ref: str
    target_commit: str
    planned: list[Planned]
    blockers: list[str] = field(default_factory=list)

    @property
    def moved(self) -> list[Planned]:
        return [p for p in self.planned if p.move.commit != p.move.upstream.commit]

    @property
    def decision(self) -> str:
        if self.blockers:
            return STOP
        return MOVE if self.moved else UP_TO_DATE

    def to_json(self) -> dict[str, object]:
        return {
            "target_ref": self.target_ref,
            "target_commit": self.target_commit,
            "decision": self.decision,
            "blockers": self.blockers,
            "triple": [
                {
                    "upstream": p.move.upstream.name,
                    "from": p.move.upstream.commit,
                    "to": p.move.commit,
                    "reason": p.move.reason,
                    "result": p.result.to_json() if p.result else None,
                }
                for p in self.planned
            ],
        }


def newest_commit(root: Path, up: Upstream, branch: str = BRANCH) -> str:
    """The commit `up`'s `branch` points at now: asked of its URL (or its insteadOf mirror)."""
    why = probe_url(up.url, root)
    text = "" if why else git_text(["ls-remote", up.url, f"refs/heads/{branch}"], root, check=False)
    if not text:
        raise PatchToolError(
            f"{up.name}: cannot read {branch} of {up.url} ({why or f'no branch {branch}'}); "
            "give --to-nemo-rl COMMIT, or a mirror of full histories (--mirror-dir DIR holding "
            "<Upstream>.git); nothing was changed"
        )
    return text.split()[0]


def check_clean(root: Path, manifest: Manifest) -> None:
    """Refuse before any work when the roll could not end in its commit: uncommitted changes
    where it writes, staged changes it would sweep in, or no identity to commit with."""
    ident = run(["var", "GIT_COMMITTER_IDENT"], root)
    if ident.returncode != 0:
        raise PatchToolError(
            "git has no identity to commit the roll with; set git config user.name and "
            "git config user.email (or GIT_AUTHOR_*/GIT_COMMITTER_*); nothing was changed"
        )
    staged = git_text(["diff", "--cached", "--name-only"], root)
    if staged:
        first = staged.splitlines()[0]
        raise PatchToolError(
            f"staged changes ({first} ...) would go into the roll commit; commit or unstage "
            "them first (git restore --staged <path>); nothing was changed"
        )
    paths = [MANIFEST_PATH.as_posix(), REPORT_DIR.as_posix()]
    paths += [up.series_dir.as_posix() for up in manifest.upstreams.values()]
    dirty = git_text(["status", "--porcelain", "--", *paths], root)
    if dirty:
        raise PatchToolError(
            f"uncommitted changes where the roll writes ({dirty.splitlines()[0].strip()} ...); "
            "commit or stash them first; nothing was changed"
        )


def plan_roll(
    root: Path,
    to_ref: str = "",
    *,
    tripwire_for: Callable[[Upstream], TripwireHook | None] | None = None,
    progress: Progress = lambda _: None,
) -> RollPlan:
    """Resolve the triple from NeMo-RL `to_ref` (default: newest on main) and replay all series."""
    manifest = load_manifest(root)
    if TOP not in manifest.upstreams:
        raise PatchToolError(f"roll follows {TOP}'s chain; {MANIFEST_PATH} has no [{TOP}]")
    top = manifest.upstreams[TOP]
    ref = to_ref or newest_commit(root, top)
    label = to_ref or f"{BRANCH} ({short(ref)})"
    progress(f"roll: {TOP} {label}: reading the nested pins")
    with tempfile.TemporaryDirectory(prefix="patches-roll-probe-") as tmp:
        moves = follow_chain(root, manifest, TOP, ref, Path(tmp))
    moves[0].reason = f"{BRANCH} now" if not to_ref else f"--to-nemo-rl {to_ref}"
    for move in moves:
        progress(
            f"roll: {move.upstream.name} {short(move.upstream.commit)} -> {short(move.commit)}"
        )

    def hook(up: Upstream) -> TripwireHook | None:
        moving = any(m.upstream.name == up.name and m.commit != up.commit for m in moves)
        return tripwire_for(up) if tripwire_for is not None and moving else None

    planned = plan(root, moves, None, replay_unmoved=True, tripwire_for=hook)
    return RollPlan(label, moves[0].commit, planned, _blockers(planned))


def _blockers(planned: list[Planned]) -> list[str]:
    out = []
    for p in planned:
        assert p.result is not None
        out += [
            f"{p.move.upstream.name}/{res.name}: {res.classification}"
            for res in p.result.patches
            if res.classification not in MOVABLE
        ]
    return out


def write_roll(root: Path, roll: RollPlan, command: list[str], *, dry_run: bool) -> list[str]:
    """Write every moved series, pin and report; nothing when held back (a dry run or a stop).

    Every scratch directory is removed: a blocked series is resolved with `rebase` (the
    commands in `next_steps`), which keeps its conflict for finishing by hand.
    """
    if dry_run or roll.decision != MOVE:
        for p in roll.planned:
            if p.scratch is not None:
                remove_scratch(p.scratch)
        return []
    written: list[str] = []
    for p in roll.planned:
        assert p.result is not None and p.scratch is not None
        if p.move.commit == p.move.upstream.commit:
            remove_scratch(p.scratch)
            continue
        _, files = finish(
            root, p.move.upstream, p.result, p.scratch, markdown(p.result, command, ""),
            hold=False, new_commit=p.move.commit, new_tag=p.result.new.tag,
        )  # fmt: skip
        written += [f for f in files if f not in written]
    return written


def next_steps(roll: RollPlan) -> list[list[str]]:
    """For a stopped roll: the `rebase` that resolves each blocked series, then the roll again."""
    blocked = {b.split("/", 1)[0] for b in roll.blockers}
    steps = [
        ["tools/patches", "rebase", p.move.upstream.name, "--to", p.move.commit]
        for p in roll.planned
        if p.move.upstream.name in blocked
    ]
    return [*steps, ["tools/patches", "roll", "--to-nemo-rl", roll.target_commit]] if steps else []


def commit_roll(root: Path, roll: RollPlan, written: list[str]) -> str:
    """One commit holding the three pin moves (gitlinks are staged by the writer) and files."""
    # The series directories too: a retired patch's old path is a deletion `written` omits.
    dirs = [p.move.upstream.series_dir.as_posix() for p in roll.moved]
    git(["add", "-A", "--", *sorted({*written, *dirs})], root)
    git(["commit", "-q", "-m", commit_message(roll)], root)
    return git_text(["rev-parse", "HEAD"], root)


def commit_message(roll: RollPlan) -> str:
    """Subject, the triple and each series' summary: what a reviewer of the roll PR reads."""
    lines = [f"Roll the pins to {TOP} {roll.target_ref}", ""]
    for p in roll.planned:
        up = p.move.upstream
        assert p.result is not None
        lines.append(
            f"{up.name}: {short(up.commit)} -> {short(p.move.commit)} ({p.move.reason}); "
            f"{summary(p.result)}"
        )
    lines += ["", "Generated by tools/patches roll; reports under docs/rebases/."]
    return "\n".join(lines) + "\n"
