"""A `git` on PATH in front of the real one, for concurrency and fault tests.

Only `git am` is affected (`git am --abort` never), and with FAULTY_GIT_ONLY=<text> only where
the working directory contains that text (one checkout of several).
`slow_am`: `git am` sleeps first (an apply that is busy for a while). `enospc_after_am`: `git
am` runs for real, then the wrapper reports git's own ENOSPC message and fails, as a full disk
found while writing would (simulated: the disk is not full). `fsize_am`: `git am` runs for
real under `ulimit -f 1` (a 1 KiB file-size limit), so the kernel refuses its writes (EFBIG /
SIGXFSZ): a real write failure inside git, the nearest to a full disk without root.
With FAULTY_GIT_MARK=<file>, the wrapper creates that file when an affected `git am` starts, so
a test can act at that moment rather than at a guess (the git calls before it are real).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

MODES = {
    "slow_am": 'sleep "${FAULTY_GIT_SLEEP:-5}"; exec "$REAL" "$@"',
    "enospc_after_am": (
        '"$REAL" "$@" >/dev/null 2>&1\n'
        'echo "error: unable to write file .git/objects/ab/cdef: No space left on device" >&2\n'
        'echo "fatal: write error: No space left on device" >&2\nexit 128'
    ),
    "fsize_am": 'ulimit -f 1; exec "$REAL" "$@"',
}


def install(bin_dir: Path, mode: str) -> dict[str, str]:
    """Write the wrapper into `bin_dir`; the environment that puts it first on PATH."""
    real = shutil.which("git")
    assert real is not None
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "git"
    script.write_text(
        "#!/bin/sh\n"
        f'REAL="{real}"\n'
        'for arg in "$@"; do\n'
        '  if [ "$arg" = "am" ]; then break; fi\n'
        "done\n"
        'if [ "$arg" != "am" ]; then exec "$REAL" "$@"; fi\n'
        'case "$PWD" in *"${FAULTY_GIT_ONLY:-}"*) ;; *) exec "$REAL" "$@";; esac\n'
        'case "$*" in *--abort*) exec "$REAL" "$@";; esac\n'
        'if [ -n "${FAULTY_GIT_MARK:-}" ]; then : > "$FAULTY_GIT_MARK"; fi\n'
        f"{MODES[mode]}\n"
    )
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def wait_for_mark(mark: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    """Return once the wrapper has created `mark` (an affected `git am` began); fail with the
    command's output if it ended or timed out first."""
    deadline = time.monotonic() + timeout
    while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mark.exists(), f"git am never started: {proc.communicate()}"
