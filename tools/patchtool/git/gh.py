"""GitHub's CLI `gh`, as open-pr runs it: found on PATH unless given, run as an argument list
(no byte of a patch reaches a shell), its answer the URL it prints."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path


def gh_executable(given: str | None) -> str | None:
    """`given` (tests pass a fake), else `gh` from PATH, else None."""
    return given if given is not None else shutil.which("gh")


def gh_url(gh_path: str, args: list[str], cwd: Path) -> tuple[str, str]:
    """Run `gh args`: (the last URL it printed, "") or ("", why it failed: its last stderr
    line, else its exit status)."""
    proc = subprocess.run([gh_path, *args], cwd=cwd, capture_output=True, check=False)
    urls = re.findall(r"https?://\S+", proc.stdout.decode(errors="replace"))
    if proc.returncode == 0 and urls:
        return urls[-1], ""
    tail = proc.stderr.decode(errors="replace").strip().splitlines()
    return "", tail[-1] if tail else f"exit {proc.returncode}, no URL printed"
