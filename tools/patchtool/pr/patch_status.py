"""`set-status PATCH KIND [DETAIL]`: record a patch's Upstream-Status (e.g. the PR URL).

The trailer is rewritten in the patch file, in its port onto main (model/ports.py) when it has
one (lint wants their trailers equal), and, when branch `patched` of the upstream checkout
carries the patch's commit, in that commit too (the branch is replayed with identical trees),
so `export --check` stays clean.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import branch_commits, rev
from ..model.manifest import Upstream, load_manifest
from ..model.ports import find_port, refuse_port
from ..model.series import SERIES_FILE, load_series, read_series
from ..model.trailers import STATUS_KEY, amend_commit_trailer, set_patch_trailer, status_value
from ..source.checkout import (
    BRANCH_REF,
    checkout_dir,
    is_repo,
    move_branch,
    patched_range,
    record_applied,
    series_digest,
)

_URL_RE = re.compile(r"^https?://\S+$")


@dataclass
class Located:
    """A patch file, its upstream, and its position in the series (-1 when retired)."""

    path: Path
    upstream: Upstream
    index: int


def locate_patch(root: Path, given: str) -> Located:
    """`patches/<Upstream>/<name>.patch` (relative to cwd or root) -> upstream and index."""
    candidates = [Path(given), root / given]
    path = next((p.resolve() for p in candidates if p.is_file()), None)
    if path is None:
        raise PatchToolError(f"{given}: no such patch file (give patches/<Upstream>/<name>.patch)")
    manifest = load_manifest(root)
    patches_dir = (root / "patches").resolve()
    try:
        rel = path.relative_to(patches_dir)
    except ValueError as exc:
        raise PatchToolError(f"{given}: not under {patches_dir}") from exc
    name = rel.parts[0]
    if name not in manifest.upstreams:
        raise PatchToolError(f"{given}: {name} is not an upstream in patches/upstreams.toml")
    up = manifest.upstreams[name]
    refuse_port(path, name)
    index = -1
    if len(rel.parts) == 2:
        names = [e.name for e in read_series(root / up.series_dir / SERIES_FILE)]
        if rel.parts[1] not in names:
            raise PatchToolError(f"{given}: not listed in {up.series_dir / SERIES_FILE}")
        index = names.index(rel.parts[1])
    return Located(path, up, index)


def set_status(root: Path, given: str, kind: str, detail: str) -> list[str]:
    """Rewrite the Upstream-Status trailer (file, port, branch); return what changed."""
    value = status_value(kind, detail)
    if kind == "submitted" and not _URL_RE.match(detail.strip()):
        raise PatchToolError(f"submitted needs the PR URL (https://...), not {detail!r}")
    return set_trailer(root, given, STATUS_KEY, value)


def set_trailer(root: Path, given: str, key: str, value: str) -> list[str]:
    """Set trailer `key` in the patch file, its port and branch `patched`, in step (lint wants
    pin patch and port equal; export --check wants the branch equal); return what changed."""
    loc = locate_patch(root, given)
    port = find_port(loc.path) if loc.index >= 0 else None
    changed = []
    for path in (loc.path, port) if port else (loc.path,):
        data = path.read_bytes()
        new = set_patch_trailer(data, key, value, path)
        if new != data:
            path.write_bytes(new)
            changed.append(path.relative_to(root.resolve()).as_posix())
    if loc.index >= 0 and _update_branch(root, loc, key, value):
        changed.append(f"{loc.upstream.path}: branch patched (commit {loc.index + 1} reworded)")
    return changed


def _update_branch(root: Path, loc: Located, key: str, value: str) -> bool:
    up = loc.upstream
    repo = checkout_dir(root, up)
    if not is_repo(repo) or not rev(repo, BRANCH_REF):
        return False
    repo, base, tip = patched_range(root, up)
    commits = branch_commits(repo, base, tip)
    if loc.index >= len(commits):
        return False
    new_tip = amend_commit_trailer(repo, commits[loc.index], tip, key, value)
    if new_tip == tip:
        return False
    if move_branch(repo, new_tip, tip, f"tools/patches: {key} trailer"):
        # keep `status`/`apply` seeing the branch as the applied series
        series_dir = root / up.series_dir
        record_applied(repo, series_digest(up, series_dir, load_series(series_dir)))
    return True
