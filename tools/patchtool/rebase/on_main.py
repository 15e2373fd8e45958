"""The series as its PRs open on the upstream's `main`: every patch's port onto main
(model/ports.py), else its pin patch, applied in series order on the resolved `main`.

Why: `verify --on main` proves each patch's upstream test where its PR goes, not only on our
pin. The replay is index-only (`git apply --cached`, `write-tree`, `commit-tree`) in a scratch
repository that borrows the checkout's and the mirror's objects, so nothing is checked out and
a mirror lacking a few blobs (Megatron-Bridge's docs GIFs) still works: those paths are
recorded as absent, as a partial checkout records them, and left out of the tree verify reads.
A patch that does not apply (no port where one is needed, or a stale port) is left out and said
so; the later patches are applied without it. Nothing outside the scratch directory changes.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import git, git_text, run
from ..model.manifest import Upstream
from ..model.ports import PORT_BASE, find_port
from ..model.series import Patch, SeriesEntry, load_series, parse_patch
from ..source.partial import ABSENT_KEY, absent_paths
from .bases import history_repos, resolve_ref
from .scratch import create_scratch, remove_scratch

REPLAY_BRANCH = "refs/heads/series-on-main"


@dataclass
class MainSeries:
    """One upstream's series replayed on `commit` (its `ref`) in the repository `repo`."""

    upstream: str
    ref: str
    commit: str
    repo: Path  # HEAD is the replayed series; remove with `close()`
    series: list[tuple[SeriesEntry, Patch]] = field(default_factory=list)  # as applied
    ported: list[str] = field(default_factory=list)  # applied from their port
    left_out: dict[str, str] = field(default_factory=dict)  # patch -> why it is not applied

    def close(self) -> None:
        remove_scratch(self.repo)


def replay_on_main(root: Path, up: Upstream, ref: str = PORT_BASE) -> MainSeries:
    """`up`'s series on `ref` as it now is; PatchToolError when `ref` cannot be resolved."""
    scratch = Path(tempfile.mkdtemp(prefix=f"patches-on-main-{up.name}-"))
    try:
        repos = history_repos(root, up)
        create_scratch(scratch, repos)
        commit, _, _, why = resolve_ref(scratch, repos, up.url, ref)
        if not commit:
            raise PatchToolError(f"{up.name}: {ref} cannot be resolved here: {why}")
        replay = MainSeries(up.name, ref, commit, scratch)
        head = _apply_all(root, up, scratch, commit, replay)
        git(["update-ref", REPLAY_BRANCH, head], scratch)
        git(["symbolic-ref", "HEAD", REPLAY_BRANCH], scratch)
        absent = absent_paths(scratch, head)
        if absent:  # series_tree leaves these out, as for a partial checkout
            git(["config", ABSENT_KEY, " ".join(absent)], scratch)
        return replay
    except BaseException:
        remove_scratch(scratch)
        raise


def _apply_all(root: Path, up: Upstream, scratch: Path, base: str, replay: MainSeries) -> str:
    """Apply each patch (its port first) on `base` through a private index; the last commit."""
    env = {"GIT_INDEX_FILE": str(scratch / ".git" / "series-on-main.index")}
    git(["read-tree", base], scratch, env=env)
    head = base
    for entry, patch in load_series(root / up.series_dir):
        port = find_port(patch.path)
        chosen = port or patch.path
        proc = run(["apply", "--cached", str(chosen)], scratch, env=env)
        if proc.returncode != 0:
            why = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            replay.left_out[entry.name] = _why_not(
                scratch, env, chosen, port is not None, replay.ref, why[0] if why else ""
            )
            continue
        tree = git_text(["write-tree"], scratch, env=env)
        head = git_text(["commit-tree", tree, "-p", head, "-m", entry.name], scratch)
        replay.series.append((entry, parse_patch(chosen) if port else patch))
        if port:
            replay.ported.append(entry.name)
    return head


def _why_not(
    scratch: Path, env: dict[str, str], chosen: Path, ported: bool, ref: str, error: str
) -> str:
    """Why a patch is left out: already on `ref` (it reverse-applies: retire it as upstreamed),
    or it does not apply (a port is needed, or its port is stale: `error`, git apply's first
    line)."""
    if run(["apply", "--cached", "--check", "-R", str(chosen)], scratch, env=env).returncode == 0:
        return f"already on {ref}: the patch reverse-applies there; retire it as upstreamed"
    what = "its port" if ported else "the pin patch (it has no port: tools/patches port)"
    return f"{what} does not apply on {ref}: {error or 'git apply failed'}"
