"""One mutating `tools/patches` command per checkout at a time: an advisory `flock`.

Why: two `apply`/`rebase` runs on one superproject (two terminals, a CI retry beside a
developer) would interleave their git calls in the same checkouts. Mutating commands take the
lock exclusively, `verify` (which reads the checkouts) shared; the second command refuses at
once with one line naming the holder. The lock is `flock(2)` on a file in the superproject's
git directory: the kernel releases it when its process exits, however it ends (SIGKILL, OOM),
so a crashed run never leaves it stuck.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import PatchToolError

LOCK_NAME = "patchtool.lock"
EXCLUSIVE = frozenset({"apply", "reset", "rebase", "pin", "export", "set-status"})
SHARED = frozenset({"verify"})


def git_dir(root: Path) -> Path:
    """The superproject's (per-worktree) git directory, read from `.git` without running git;
    `root` itself where it is not a git checkout."""
    dot_git = root / ".git"
    if dot_git.is_dir():
        return dot_git
    if dot_git.is_file():
        text = dot_git.read_text().strip()
        if text.startswith("gitdir:"):
            path = Path(text.removeprefix("gitdir:").strip())
            return path if path.is_absolute() else (root / path).resolve()
    return root


def lock_path(root: Path) -> Path:
    return git_dir(root) / LOCK_NAME


@contextlib.contextmanager
def command_lock(root: Path, command: str, reading: bool = False) -> Iterator[None]:
    """Hold the superproject's lock for `command`: exclusive for a mutating one, shared for
    one that only reads the checkouts (`verify`, or `reading`: --check, --dry-run), none for
    the rest."""
    if command not in EXCLUSIVE and command not in SHARED:
        yield
        return
    path = lock_path(root)
    exclusive = command in EXCLUSIVE and not reading
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "a verify"
            raise PatchToolError(
                f"{root}: another tools/patches command is running on this checkout "
                f"({holder}; lock {path}); wait for it to finish and re-run {command}"
            ) from None
        if exclusive:
            os.ftruncate(fd, 0)
            stamp = time.strftime("%H:%M:%S")
            os.pwrite(fd, f"{command}, pid {os.getpid()}, since {stamp}".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
