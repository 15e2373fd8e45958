"""Path safety of patches: every path a patch names must stay inside its upstream checkout.

Shared by `lint` (reports) and `apply` (refuses before git runs): `..` components, absolute
paths, and paths reaching through a symlink that points outside the checkout.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from .series import Patch


def path_problem(path: str) -> str | None:
    """Why `path` (as written in a patch, prefix stripped) escapes the upstream, or None."""
    if not path:
        return "empty path"
    if path.startswith("/") or PurePosixPath(path).is_absolute():
        return f"absolute path {path!r} (patch paths are relative to the upstream root)"
    if ".." in PurePosixPath(path).parts:
        return f"path {path!r} contains '..' (outside the upstream)"
    if path.split("/", 1)[0] == ".git":
        return f"path {path!r} writes into .git"
    return None


def symlink_problem(checkout: Path, path: str) -> str | None:
    """Why `path` would be written through a symlink leading outside `checkout`, or None."""
    root = os.path.realpath(checkout)
    current = Path(checkout)
    for part in PurePosixPath(path).parts:
        current = current / part
        if current.is_symlink():
            target = os.path.realpath(current)
            if target != root and not target.startswith(root + os.sep):
                rel = current.relative_to(checkout).as_posix()
                return f"path {path!r} goes through symlink {rel} -> {os.readlink(current)} (outside the upstream)"
        elif not current.exists():
            break
    return None


def patch_path_problems(patch: Patch, checkout: Path | None) -> list[tuple[int, str]]:
    """(patch line, message) for each unsafe path in `patch`; symlinks checked if `checkout`."""
    problems: list[tuple[int, str]] = []
    for diff in patch.files:
        for line, path in diff.path_refs:
            why = path_problem(path)
            if why is None and checkout is not None:
                why = symlink_problem(checkout, path)
            if why and (line, why) not in problems:
                problems.append((line, why))
    return problems
