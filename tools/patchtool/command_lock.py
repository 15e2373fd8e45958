"""One mutating `tools/patches` command per checkout at a time: an advisory `flock`.

Why: two `apply`/`rebase` runs on one superproject (two terminals, a CI retry beside a
developer) would interleave their git calls in the same checkouts. Mutating commands take the
lock exclusively, `verify` (which reads the checkouts) shared; the second command refuses at
once with one line naming the holder. The lock is `flock(2)` on a file in the superproject's
git directory: the kernel releases it when its process exits, however it ends (SIGKILL, OOM),
so a crashed run never leaves it stuck.

Who holds it: every holder, shared or exclusive, writes one record (`<pid>-<n>` in
`patchtool.lock.holders/`: command, pid, start time) and removes it on release. A refusal
names the records whose process is still alive, so a crashed or long-finished command is
never named; when no live record is found it says it cannot tell.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import PatchToolError

LOCK_NAME = "patchtool.lock"
HOLDERS_NAME = "patchtool.lock.holders"
EXCLUSIVE = frozenset({"apply", "reset", "rebase", "pin", "port", "export", "set-status", "adopt"})
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


def holders_dir(root: Path) -> Path:
    return git_dir(root) / HOLDERS_NAME


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


_RECORDS = itertools.count()  # one process may hold the lock more than once (shared)


def _record(directory: Path, command: str) -> Path:
    directory.mkdir(exist_ok=True)
    record = directory / f"{os.getpid()}-{next(_RECORDS)}"
    stamp = time.strftime("%H:%M:%S")
    record.write_text(f"{command}, pid {os.getpid()}, since {stamp}")
    return record


def live_holders(root: Path) -> list[str]:
    """The records of holders whose process is alive, oldest first; dead ones are removed."""
    directory = holders_dir(root)
    found = []
    for record in sorted(directory.glob("*-*"), key=lambda r: r.stat().st_mtime_ns):
        pid = record.name.partition("-")[0]
        if pid.isdigit() and _alive(int(pid)):
            with contextlib.suppress(OSError):
                found.append(record.read_text().strip())
        else:
            record.unlink(missing_ok=True)
    return found


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
            holders = "; ".join(live_holders(root)) or "which one cannot be told"
            raise PatchToolError(
                f"{root}: another tools/patches command is running on this checkout "
                f"({holders}; lock {path}); wait for it to finish and re-run {command}"
            ) from None
        label = command if exclusive or command in SHARED else f"{command} (reading)"
        record = _record(holders_dir(root), label)
        try:
            yield
        finally:
            record.unlink(missing_ok=True)
    finally:
        os.close(fd)  # releases the lock
