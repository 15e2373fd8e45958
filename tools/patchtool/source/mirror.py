"""An offline mirror directory: `DIR/<Upstream>.git` bare repositories (shallow allowed) stand
in for the submodule URLs, for this run only.

`--mirror-dir DIR` or `PATCHTOOL_MIRROR_DIR=DIR`. For each upstream whose `DIR/<name>.git`
holds its pinned commit, git's own `url.<DIR>/<name>.git.insteadOf=<manifest url>` (plus
`protocol.file.allow=always`, which submodule clones of a local path need) is put on every git
call of this process through `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`
(git/git.py): nothing is written to any config file. An upstream whose mirror is absent or
lacks the pin (after a pin moved) is left alone: it falls back exactly as without a mirror.

A mirror repository with its full history (not shallow) also lends its objects to the
rebase scratch repositories (`history_mirror`): `rebase`, `pin` and `roll` then read commits
and ancestry from it directly, without fetching (a fetch refuses a mirror that lacks blobs,
such as Megatron-Bridge's docs GIFs).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import git_ok, git_text, set_session_config
from ..model.manifest import Manifest

ENV_VAR = "PATCHTOOL_MIRROR_DIR"  # cli.py spells it too (no import before it is needed)

_active: list[Path] = []  # the mirror directory of the running command, while use_mirror holds


@dataclass(frozen=True)
class MirrorPlan:
    """The rewrites a mirror directory gives (`config` pairs), and a note per upstream left out."""

    config: list[tuple[str, str]]
    skipped: list[str]


def mirror_dir(flag: str | None) -> Path | None:
    """The mirror directory of this run: the flag, else the environment variable, else None."""
    value = flag or os.environ.get(ENV_VAR, "")
    return Path(value).expanduser().resolve() if value else None


def plan_mirror(directory: Path, manifest: Manifest) -> MirrorPlan:
    """Which upstreams `directory` can serve (their pin is in `<name>.git`), as git config."""
    config: list[tuple[str, str]] = []
    skipped: list[str] = []
    for up in manifest.upstreams.values():
        bare = directory / f"{up.name}.git"
        if not bare.is_dir():
            skipped.append(f"{up.name}: no {bare}")
            continue
        if not git_ok(["cat-file", "-e", f"{up.commit}^{{commit}}"], bare):
            skipped.append(f"{up.name}: {bare} lacks the pin {up.commit[:12]}")
            continue
        config.append((f"url.{bare}.insteadOf", up.url))
    if config:
        config.append(("protocol.file.allow", "always"))
    return MirrorPlan(config, skipped)


@contextmanager
def use_mirror(directory: Path, manifest: Manifest) -> Iterator[MirrorPlan]:
    """Route this process's git calls for the upstreams `directory` holds to it, for one
    command: a later command of the same process (a test, a library caller) without a mirror
    must not inherit this one's."""
    if not directory.is_dir():
        raise PatchToolError(
            f"mirror directory {directory} does not exist (--mirror-dir / {ENV_VAR}); it holds "
            "<Upstream>.git bare repositories of the pins"
        )
    plan = plan_mirror(directory, manifest)
    set_session_config(plan.config)
    _active[:] = [directory]
    try:
        yield plan
    finally:
        _active.clear()
        set_session_config([])


def mirror_repo(name: str) -> Path | None:
    """`<mirror>/<name>.git` of this run, if a mirror directory is active and holds one."""
    if not _active:
        return None
    bare = _active[0] / f"{name}.git"
    return bare if bare.is_dir() else None


def history_mirror(name: str) -> Path | None:
    """`<mirror>/<name>.git` of this run when it holds full history (not shallow), else None."""
    if not _active:
        return None
    bare = _active[0] / f"{name}.git"
    if not bare.is_dir():
        return None
    shallow = git_text(["rev-parse", "--is-shallow-repository"], bare, check=False)
    return bare if shallow == "false" else None
