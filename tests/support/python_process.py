"""A Python child process for a test (a rank, an isolated import), forked cheaply under verify.

Outside `tools/patches verify` this is `subprocess.Popen([sys.executable, "-c", ...])`. Under
verify (`PATCHTOOL_FORKSERVER` set) the child is forked by verify's fork server instead, which
has torch and the other third-party modules already imported, so each rank skips ~15 s of
imports; the child is still a process of its own with this process's environment and working
directory, and imports every upstream module from the tree its state names
(tools/patchtool/verify/forkserver.py checks that).
"""

from __future__ import annotations

import os
import subprocess
import sys

from tools.patchtool.verify.forkclient import ForkedProcess
from tools.patchtool.verify.forkserver import SOCKET_VAR


def python_c(script: str, *args: str) -> subprocess.Popen[str] | ForkedProcess:
    """`python -c script args...` with stdout and stderr piped (text); both kinds answer
    `communicate(timeout=...)`, `returncode` and `kill()` alike."""
    server = os.environ.get(SOCKET_VAR)
    if server:
        return ForkedProcess(server, ["-c", script, *args])
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
