"""`port PATCH`: (re)generate a patch's port onto the upstream's `main` (model/ports.py).

The rebase machinery's scratch repository (rebase/scratch.py: the checkout's and the mirror's
objects borrowed, only the touched files checked out) on the resolved `main`, with the ports
(else pin patches) of the same-upstream patches it `Depends-On` applied first, as `open-pr
--stack` stacks them. Then, first that holds:

| outcome | meaning |
|---|---|
| `not-needed` | the pin patch applies exactly (offsets allowed): open-pr uses it; a port is removed |
| `kept` | the existing port's diff applies exactly: rewritten with the pin patch's message |
| `merged-3way` | `git am -3` merges the pin patch cleanly: that commit is the port |
| `conflict` | markers left in the scratch tree: resolve, `git am --continue`, `--resume` |

`kept` is skipped with `from_pin` (the pin patch's code changed: start again from it).
Nothing outside the scratch directory changes until a port is written.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import format_patch, git, git_text
from ..model.manifest import Upstream, load_manifest, short
from ..model.ports import (
    PORT_BASE,
    PORT_DIR,
    find_port,
    message_of,
    pin_path,
    port_path,
    refuse_port,
)
from ..model.series import SERIES_FILE, parse_patch, read_series
from .bases import history_repos, resolve_ref
from .scratch import (
    am_apply,
    am_in_progress,
    checkout_commit,
    create_scratch,
    head_of_scratch,
    remove_scratch,
    sparse_checkout,
)

STATE_NAME = "patchtool-port.json"
NOT_NEEDED, KEPT, MERGED, CONFLICT = "not-needed", "kept", "merged-3way", "conflict"


@dataclass
class PortResult:
    patch: str  # the pin patch, relative to the root
    outcome: str
    base: str  # the commit `ref` resolved to
    ref: str = PORT_BASE
    port: str = ""  # the port file written or removed, relative to the root ("" when none)
    scratch: Path | None = None  # kept on a conflict
    detail: str = ""


def _locate(root: Path, given: str) -> tuple[Upstream, Path]:
    """(upstream, pin patch file) of `patches/<Upstream>/<name>.patch`, listed in its series."""
    path = next((p.resolve() for p in (Path(given), root / given) if p.is_file()), None)
    manifest = load_manifest(root)
    if path is not None:
        refuse_port(path, path.parent.parent.name)
    if path is None or path.parent.parent != (root / "patches").resolve():
        raise PatchToolError(f"{given}: no such patch (give patches/<Upstream>/<name>.patch)")
    up = manifest.upstreams.get(path.parent.name)
    if up is None:
        raise PatchToolError(f"{given}: {path.parent.name} is not in patches/upstreams.toml")
    names = [e.name for e in read_series(root / up.series_dir / SERIES_FILE)]
    if path.name not in names:
        raise PatchToolError(f"{given}: not listed in {up.series_dir / SERIES_FILE}")
    return up, path


def _dependencies(up: Upstream, patch_file: Path) -> list[Path]:
    """What open-pr --stack puts under this patch: its same-upstream `Depends-On` patches,
    each as its port when it has one."""
    deps = []
    for value in parse_patch(patch_file).trailer_values("Depends-On"):
        owner, _, name = value.partition("/")
        if owner == up.name:
            dep = patch_file.parent / name
            deps.append(find_port(dep) or dep)
    return deps


def _prepare(root: Path, up: Upstream, patch_file: Path, ref: str, scratch: Path) -> str:
    """The scratch repo at `ref` with the dependencies applied; the commit `ref` resolved to."""
    repos = history_repos(root, up)
    create_scratch(scratch, repos)
    base, _, _, why = resolve_ref(scratch, repos, up.url, ref)
    if not base:
        raise PatchToolError(f"{up.name}: cannot resolve {ref} ({why}); pass --mirror-dir")
    deps = _dependencies(up, patch_file)
    files = [patch_file, *deps] + ([p] if (p := find_port(patch_file)) else [])
    sparse_checkout(scratch, sorted({f.path for x in files for f in parse_patch(x).files}))
    checkout_commit(scratch, base)
    for dep in deps:
        if am_apply(scratch, dep, three_way=False).returncode != 0:
            git(["am", "--abort"], scratch)
            pin = pin_path(dep) if dep.parent.name == PORT_DIR else dep
            raise PatchToolError(
                f"{patch_file.name} Depends-On {dep.name}, which does not apply on {ref}: "
                f"port it first (tools/patches port {pin.relative_to(root).as_posix()})"
            )
    return base


def _try(scratch: Path, patch_file: Path, three_way: bool) -> bool:
    """Apply one patch as the next commit; on failure leave the scratch as it was, except a
    3-way conflict, whose markers stay for the hand resolution."""
    if am_apply(scratch, patch_file, three_way).returncode == 0:
        return True
    if not three_way:
        git(["am", "--abort"], scratch)
    return False


def _write(root: Path, patch_file: Path, scratch: Path) -> str:
    """The scratch HEAD as the port file: the pin patch's message, the resolved diff."""
    mbox = format_patch(scratch, "HEAD^!")
    _, sep, diff = mbox.partition(b"\ndiff --git ")
    if not sep:
        raise PatchToolError(f"{scratch}: HEAD changes nothing; there is no port to write")
    port = port_path(patch_file)
    port.parent.mkdir(exist_ok=True)
    port.write_bytes(message_of(patch_file.read_bytes()) + sep + diff)
    return port.relative_to(root).as_posix()


def make_port(
    root: Path,
    given: str,
    ref: str = PORT_BASE,
    scratch: Path | None = None,
    from_pin: bool = False,
) -> PortResult:
    root = root.resolve()
    up, patch_file = _locate(root, given)
    scratch = scratch or Path(tempfile.mkdtemp(prefix=f"patches-port-{up.name}-"))
    try:
        result = _attempt(root, up, patch_file, ref, scratch, from_pin)
    except BaseException:
        remove_scratch(scratch)
        raise
    if result.outcome != CONFLICT:
        remove_scratch(scratch)
    return result


def _attempt(
    root: Path, up: Upstream, patch_file: Path, ref: str, scratch: Path, from_pin: bool
) -> PortResult:
    """The outcomes of the module's table, in its order."""
    rel = patch_file.relative_to(root).as_posix()
    base = _prepare(root, up, patch_file, ref, scratch)
    start = head_of_scratch(scratch)
    existing = find_port(patch_file)
    if _try(scratch, patch_file, three_way=False):
        if existing:
            existing.unlink()
        gone = existing.relative_to(root).as_posix() if existing else ""
        return PortResult(rel, NOT_NEEDED, base, ref=ref, port=gone)
    if existing and not from_pin and _try(scratch, existing, three_way=False):
        return PortResult(rel, KEPT, base, ref=ref, port=_write(root, patch_file, scratch))
    if _try(scratch, patch_file, three_way=True):
        return PortResult(rel, MERGED, base, ref=ref, port=_write(root, patch_file, scratch))
    state = {"patch": rel, "start": start, "base": base, "ref": ref}
    (scratch / ".git" / STATE_NAME).write_text(json.dumps(state), encoding="utf-8")
    conflicted = git_text(["diff", "--name-only", "--diff-filter=U"], scratch).split()
    return PortResult(rel, CONFLICT, base, ref=ref, scratch=scratch, detail=", ".join(conflicted))


def port_applies(root: Path, up: Upstream, patch_file: Path, ref: str = PORT_BASE) -> bool:
    """Whether `patch_file`'s port applies exactly on `ref` with its dependencies under it, as
    open-pr would apply it (the status page's measurement; nothing is written)."""
    port = find_port(patch_file)
    if port is None:
        raise PatchToolError(f"{patch_file.name} has no port under {up.name}/{PORT_DIR}/")
    scratch = Path(tempfile.mkdtemp(prefix=f"patches-port-check-{up.name}-"))
    try:
        _prepare(root.resolve(), up, patch_file, ref, scratch)
        return _try(scratch, port, three_way=False)
    finally:
        remove_scratch(scratch)


def resume_port(root: Path, scratch: Path) -> PortResult:
    """Write the port from a scratch whose conflict was resolved and `git am --continue`d."""
    root = root.resolve()
    state_file = scratch / ".git" / STATE_NAME
    if not state_file.is_file():
        raise PatchToolError(f"{scratch}: not a scratch left by tools/patches port")
    state = json.loads(state_file.read_text(encoding="utf-8"))
    if am_in_progress(scratch):
        raise PatchToolError(
            f"{scratch}: git am is still in progress; resolve the markers, git add, "
            "git am --continue, then resume"
        )
    parent = git_text(["rev-parse", "HEAD^"], scratch)
    if parent != state["start"]:
        raise PatchToolError(
            f"{scratch}: HEAD must be one commit on {short(state['start'])} (the port), "
            f"found its parent at {short(parent)}"
        )
    _, patch_file = _locate(root, state["patch"])
    port = _write(root, patch_file, scratch)
    remove_scratch(scratch)
    return PortResult(state["patch"], "resolved", state["base"], ref=state["ref"], port=port)
