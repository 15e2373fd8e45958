"""A Python child process for a test (a rank, an isolated import), forked from a warm server.

A child is forked by a server that imported the heavy modules once, instead of being a fresh
interpreter that spends ~30 s of CPU importing torch, transformers, megatron-core and Bridge
(2 cores). It is still a process of its own with this process's environment, working
directory and `sys.path` as a new interpreter would build it (verify/forkserver.py). Under
`tools/patches verify` (`PATCHTOOL_FORKSERVER` set) the server is verify's, which preloads only
third-party modules and checks that each child imported every upstream module from its
state's tree. In a plain pytest run it is this module's: started at the first child, with
verify's preload plus megatron-core and Bridge (one tree here, the installed checkout), ended
with the pytest process. In a state that names its own trees without a fork server, the child
is a fresh interpreter (`python_c`).
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from tests.support.ports import free_port
from tools.patchtool.verify.forkclient import ForkedProcess, ForkServer
from tools.patchtool.verify.forkserver import SOCKET_VAR
from tools.patchtool.verify.states import verify_preload
from tools.patchtool.verify.trees import TREE_VAR_PREFIX

REPO_ROOT = Path(__file__).resolve().parents[2]

# Beyond verify's third-party preload: the upstream packages every child here imports, which
# verify must leave to each state's tree but a plain run has exactly one of.
UPSTREAM_PRELOAD = ("megatron.core", "megatron.bridge")

_server: ForkServer | None = None


def warm_server() -> str:
    """The socket of this pytest process's fork server, started on first use."""
    global _server
    if _server is None:
        sock = Path(tempfile.mkdtemp(prefix="ptv-", dir="/tmp")) / "s"
        names = [*verify_preload(REPO_ROOT), *UPSTREAM_PRELOAD]
        _server = ForkServer(Path(sys.executable), sock, names, [], [])
        atexit.register(_server.kill)
    return str(_server.sock_path)


def python_c(script: str, *args: str) -> subprocess.Popen[str] | ForkedProcess:
    """`python -c script args...` with stdout and stderr piped (text); both kinds answer
    `communicate(timeout=...)`, `returncode` and `kill()` alike.

    Inside a state that names its own trees (`PATCHTOOL_TREE_*`: verify without its fork
    server, `rebase --tripwires`) the child is a fresh interpreter: this run's server would
    hold megatron-core from the checkout, not from the state's tree."""
    server = os.environ.get(SOCKET_VAR)
    if server:
        return ForkedProcess(server, ["-c", script, *args])
    if not any(name.startswith(TREE_VAR_PREFIX) for name in os.environ):
        return ForkedProcess(warm_server(), ["-c", script, *args])
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _output(proc: subprocess.Popen[str] | ForkedProcess) -> tuple[str, str]:
    return proc.communicate()


RANK_GRACE_S = 5.0  # how long the other ranks get to end once one rank failed


def run_ranks(script: str, world: int, *args: str, timeout: float = 900.0) -> list[str]:
    """`script` on `world` ranks, each `python -c script PORT RANK ARGS...` (`python_c`).

    Returns each rank's stdout once every rank exited 0. Once a rank fails, the others get a
    few seconds, then are killed (a peer left in a collective would wait 30 minutes), and the
    test fails naming each rank that failed with the end of its stderr (its traceback), then
    the ones killed; ranks still running at `timeout` are killed and named too."""
    port = str(free_port())
    procs = [python_c(script, port, str(rank), *args) for rank in range(world)]
    deadline = time.monotonic() + timeout
    with ThreadPoolExecutor(max_workers=world) as pool:
        streams = [pool.submit(_output, proc) for proc in procs]
        pending = set(streams)
        while pending and time.monotonic() < deadline:
            _, pending = wait(pending, deadline - time.monotonic(), FIRST_COMPLETED)
            if any(proc.returncode not in (None, 0) for proc in procs):
                deadline = min(deadline, time.monotonic() + RANK_GRACE_S)
        killed = [rank for rank, proc in enumerate(procs) if proc.returncode is None]
        for rank in killed:
            procs[rank].kill()
    failed = [
        f"rank {rank} exited with {proc.returncode}:\n{streams[rank].result()[1][-4000:]}"
        for rank, proc in enumerate(procs)
        if rank not in killed and proc.returncode != 0
    ]
    why = "after a peer failed" if failed else f"at the {timeout:.0f} s timeout"
    failed += [f"rank {rank} was killed (still running {why})" for rank in killed]
    assert not failed, "\n".join(failed)
    return [stream.result()[0] for stream in streams]
