"""The fork server's client side (verify's process): start the server, ask it for children.

Why apart from forkserver.py: that file is also the server's `__main__` (run by the project's
venv python, standard library only, nothing imported from this package); this side lives in
verify's own process. The protocol (length-prefixed JSON, SCM_RIGHTS stream fds) is shared.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import forkserver
from .forkserver import SOCKET_VAR, ForkServerError, receive, send


class ForkedProcess:
    """A child of the fork server, used like a `subprocess.Popen` with piped stdout/stderr."""

    def __init__(
        self,
        sock_path: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        self.returncode: int | None = None
        self.cpu_s = 0.0  # CPU seconds of the child (and what it waited for), once exited
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn.connect(sock_path)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        request = {
            "argv": list(argv),
            "env": dict(os.environ if env is None else env),
            "cwd": str(cwd or os.getcwd()),
        }
        try:
            send(self._conn, request, [null, out_w, err_w])
        finally:
            for fd in (null, out_w, err_w):
                os.close(fd)
        self._out, self._err = out_r, err_r
        answer, _ = receive(self._conn)
        if "error" in answer:
            os.close(out_r)
            os.close(err_r)
            self._conn.close()
            raise ForkServerError(answer["error"])
        self.pid: int = answer["pid"]

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Read stdout/stderr to the end and wait for the exit status (like Popen's)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        chunks: dict[int, list[bytes]] = {self._out: [], self._err: []}
        sel = selectors.DefaultSelector()
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        sel.register(self._conn, selectors.EVENT_READ)
        try:
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(["forked", str(self.pid)], timeout or 0)
                for key, _ in sel.select(left):
                    if key.fileobj is self._conn:
                        sel.unregister(self._conn)
                        self._read_status()
                        continue
                    fd = key.fd
                    data = os.read(fd, 65536)
                    if data:
                        chunks[fd].append(data)
                    else:
                        sel.unregister(fd)
                        os.close(fd)
        finally:
            sel.close()
        out = b"".join(chunks[self._out]).decode(errors="replace")
        err = b"".join(chunks[self._err]).decode(errors="replace")
        return out, err

    def _read_status(self) -> None:
        try:
            answer, _ = receive(self._conn)
            self.returncode = int(answer["returncode"])
            self.cpu_s = float(answer.get("cpu_s", 0.0))
        except (EOFError, OSError, KeyError, ValueError):
            self.returncode = -signal.SIGKILL  # the server went away with the child
        self._conn.close()

    def kill(self) -> None:
        """SIGKILL the child (the server reports its status)."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class ForkServer:
    """The running server: started by verify with the project's interpreter, ended with it."""

    def __init__(
        self,
        python: Path,
        sock_path: Path,
        preload_names: Sequence[str],
        forbidden: Sequence[Path],
        packages: Sequence[str],
    ) -> None:
        self.sock_path = sock_path
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        # One thread per process (4 processes share 2 cores), and no pools before the fork.
        # pyarrow (imported by transformers' integrations where datasets is installed) starts
        # its bundled jemalloc's background purge thread at import unless told not to.
        env.update(
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            PYTHONDONTWRITEBYTECODE="1",
            JE_ARROW_MALLOC_CONF="background_thread:false",
        )
        cmd = [str(python), "-P", str(Path(forkserver.__file__).resolve()), str(sock_path)]
        cmd += ["--forbidden", *[str(r) for r in forbidden], "--packages", *packages]
        cmd += ["--preload", *preload_names]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            text=True,
            env=env,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        try:
            line = self.proc.stdout.readline()
        except BaseException:  # interrupted while it preloads: it would finish that first
            self.kill()
            raise
        if not line:
            self.proc.wait()
            raise ForkServerError(
                f"the fork server ({python}) exited with {self.proc.returncode} before it was "
                "ready (see its error above); pass --no-fork-server to run each state as a "
                "fresh interpreter"
            )
        self.ready: dict[str, Any] = json.loads(line)

    def env(self) -> dict[str, str]:
        """What a child needs to fork its own ranks through this server."""
        return {SOCKET_VAR: str(self.sock_path)}

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> ForkedProcess:
        return ForkedProcess(str(self.sock_path), argv, env, cwd)

    def kill(self) -> None:
        """End the server, every child and whatever they started (one process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._remove_socket()

    def close(self) -> None:
        """Stop serving (children already finished) and wait for the server to exit."""
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
        if self.proc.stdout:
            self.proc.stdout.close()
        self._remove_socket()

    def _remove_socket(self) -> None:
        with contextlib.suppress(OSError):
            self.sock_path.unlink()
        if self.sock_path.parent.name.startswith("ptv-"):  # the private short directory
            with contextlib.suppress(OSError):
                self.sock_path.parent.rmdir()
