"""A fork server for `verify`: third-party modules imported once, one forked child per process.

Why: every verify state is a process of its own, and so is every rank a tripwire test starts;
each used to spend ~15 s of CPU importing torch (dynamo, inductor, DTensor, sympy) before
reaching the few upstream modules under test. The server (the project's venv python running
this file, standard library only) imports the heavy third-party modules once, never runs a
torch op and never starts a thread, and forks one child per request. A child is a fresh
interpreter's equivalent for its request: its own argv, environment, working directory and
`sys.path` (rebuilt from the request's PYTHONPATH as a new interpreter would), its own
standard streams, and no module of any upstream tree (those were refused in the server).

The proof stays checkable: `guard_violations` (run in every child when it finishes, with the
trees its state names) reports any module of an upstream package that was not loaded from
that state's tree, and any module loaded from the user's checkout or from another state's
scratch tree. A child that finds one appends it to `PATCHTOOL_STATE_REPORT`, and verify
treats the whole state as invalid (never as a tripwire that tripped).

Protocol (one Unix socket connection per child): the client sends a length-prefixed JSON
request with its stdin/stdout/stderr as SCM_RIGHTS file descriptors; the server answers
`{"pid": N}` once forked and `{"returncode": N}` when the child has exited. A client that
disconnects early has its child killed. All children stay in the server's process group, so
killing that group ends the server, every child and whatever they started.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import sys
import time
import traceback
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SOCKET_VAR = "PATCHTOOL_FORKSERVER"  # the socket a test's helper forks its ranks through
GUARD_VAR = "PATCHTOOL_STATE_GUARD"  # JSON: the state's trees, packages and forbidden roots
REPORT_VAR = "PATCHTOOL_STATE_REPORT"  # file a child appends guard violations to
GUARD_EXIT = 97  # a child whose modules came from the wrong tree exits with this code
_HEADER = struct.Struct("!I")


class ForkServerError(RuntimeError):
    """The fork server could not start or answer; verify says why and what to do."""


# -- the module-origin guard --------------------------------------------------------------


def _module_files(module: types.ModuleType) -> list[str]:
    """Where a module was loaded from: its file, else (packages) its path entries."""
    file = getattr(module, "__file__", None)
    if isinstance(file, str):
        return [file]
    return []


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _owned(name: str, packages: Sequence[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def guard_violations(
    modules: Mapping[str, types.ModuleType | None],
    trees: Mapping[str, str],
    packages: Mapping[str, Sequence[str]],
    forbidden: Sequence[str],
) -> list[str]:
    """Modules that break the state's promise to run on exactly its trees.

    `trees`: upstream -> the state's tree; `packages`: upstream -> its import roots (a module
    of those packages with a file must live in that upstream's tree; stubs and namespace
    packages have none); `forbidden`: roots no module may come from unless inside one of
    `trees` (the user's checkouts, the scratch directory of every state).
    """
    own = [os.path.realpath(t) for t in trees.values()]
    out: list[str] = []
    for name, module in sorted(modules.items()):
        if module is None:
            continue
        files = [os.path.realpath(f) for f in _module_files(module)]
        for upstream, roots in packages.items():
            tree = trees.get(upstream)
            if tree is None or not _owned(name, roots):
                continue
            real_tree = os.path.realpath(tree)
            for file in files:
                if not _inside(file, real_tree):
                    out.append(f"{name} from {file}, not from {upstream}'s tree {tree}")
        for file in files:
            if any(_inside(file, t) for t in own):
                continue
            for root in forbidden:
                if _inside(file, os.path.realpath(root)):
                    out.append(f"{name} from {file}, inside {root} but outside this state's trees")
    return out


def check_state_guard() -> list[str]:
    """Run the guard that `GUARD_VAR` describes on this process's modules; report violations."""
    spec = os.environ.get(GUARD_VAR)
    if not spec:
        return []
    guard = json.loads(spec)
    found = guard_violations(
        dict(sys.modules), guard["trees"], guard["packages"], guard["forbidden"]
    )
    report = os.environ.get(REPORT_VAR)
    if found and report:
        with open(report, "a", encoding="utf-8") as out:
            out.writelines(f"{os.getpid()}: {line}\n" for line in found)
    return found


# -- the child: a fresh interpreter's equivalent ------------------------------------------


def _fresh_sys_path(base: Sequence[str], env: Mapping[str, str], first: str) -> list[str]:
    """`sys.path` as a new interpreter started with `env` would build it (`first`: '' for -c,
    the working directory for -m)."""
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [first, *[os.path.abspath(p) for p in extra], *base]


def _shadowing(preloaded: Sequence[str], path: Sequence[str]) -> list[str]:
    """Preloaded top-level modules a fresh interpreter would have found in `path` instead."""
    out = []
    for entry in path:
        for name in preloaded:
            base = Path(entry or ".") / name
            if base.is_dir() or base.with_suffix(".py").is_file():
                out.append(f"{name} (preloaded from site-packages) also exists in {entry}")
    return out


def _kill_leftover_children() -> None:
    """Kill the multiprocessing children a state left running. multiprocessing's exit handler
    joins them without a timeout, so one rank of a failed two-rank test, left waiting in a
    collective for its dead peer, would hang the state and verify with it."""
    import multiprocessing

    for child in multiprocessing.active_children():
        print(
            f"verify: killed a child process the state left running (pid {child.pid})",
            file=sys.stderr,
        )
        child.kill()
        child.join(timeout=10)


def _run_child(request: dict[str, Any], base_path: list[str], preloaded: list[str]) -> int:
    """Run one request's code in this (forked) process; its exit status."""
    env = request["env"]
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    argv = request["argv"]
    mode = argv[0]
    path_entries = _fresh_sys_path(base_path, env, "" if mode == "-c" else os.getcwd())
    sys.path[:] = path_entries
    importlib.invalidate_caches()
    sys.path_importer_cache.clear()
    shadows = _shadowing(preloaded, path_entries[: -len(base_path)] if base_path else path_entries)
    code = 0
    try:
        if shadows:
            raise ForkServerError(
                "a state's PYTHONPATH shadows a preloaded module: " + "; ".join(shadows)
            )
        if mode == "-c":
            sys.argv = ["-c", *argv[2:]]
            main = types.ModuleType("__main__")
            main.__dict__["__builtins__"] = __builtins__
            sys.modules["__main__"] = main
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)
        elif mode == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            raise ForkServerError(f"unsupported request {argv[:1]}: only -c and -m")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    _kill_leftover_children()
    try:
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    found = check_state_guard()
    if found:
        print("module-origin guard: " + "; ".join(found), file=sys.stderr)
        code = GUARD_EXIT
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return code


# -- the server ---------------------------------------------------------------------------


def _threads() -> int:
    """OS threads of this process (forking is safe only while this is 1)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def _recv_exact(conn: socket.socket, size: int, fds: list[int]) -> bytes:
    data = b""
    while len(data) < size:
        chunk, new_fds, _flags, _addr = socket.recv_fds(conn, size - len(data), 8)
        fds.extend(new_fds)
        if not chunk:
            raise EOFError("client closed the connection")
        data += chunk
    return data


def send(conn: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    body = json.dumps(message).encode()
    payload = _HEADER.pack(len(body)) + body
    if fds:
        socket.send_fds(conn, [payload], list(fds))
    else:
        conn.sendall(payload)


def receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    fds: list[int] = []
    (size,) = _HEADER.unpack(_recv_exact(conn, _HEADER.size, fds))
    return json.loads(_recv_exact(conn, size, fds)), fds


def preload(
    names: Sequence[str], forbidden: Sequence[str], packages: Sequence[str]
) -> tuple[list[str], list[str]]:
    """Import `names` (third-party modules); refuse any module of an upstream package
    (`packages`) or loaded from `forbidden` (the checkouts, the scratch trees, the project).

    Returns (imported, notes). Raises ForkServerError when a preload pulled in such a module:
    those must be imported by each child from its own tree.
    """
    imported, notes = [], []
    # stdout carries the readiness line; what a module prints while importing goes to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        for name in names:
            try:
                importlib.import_module(name)
                imported.append(name)
            except Exception as exc:
                notes.append(f"{name}: {type(exc).__name__}: {exc}")
    this = os.path.realpath(__file__)  # the server itself (as __main__ or __mp_main__)
    loaded = {
        n: m
        for n, m in sys.modules.items()
        if os.path.realpath(getattr(m, "__file__", None) or "-") != this
    }
    bad = [f"{n} (an upstream package)" for n in sorted(loaded) if _owned(n, packages)]
    bad += guard_violations(loaded, {}, {}, list(forbidden))
    if bad:
        raise ForkServerError(
            "a preloaded module comes from the repository or an upstream tree (only "
            "third-party modules may be preloaded): " + "; ".join(bad[:5])
        )
    return imported, notes


def serve(
    sock_path: str, names: Sequence[str], forbidden: Sequence[str], packages: Sequence[str]
) -> None:
    """Preload `names`, then fork a child per request until stdin closes (or SIGKILL)."""
    base_path = list(sys.path)
    started = time.process_time()
    imported, notes = preload(names, forbidden, packages)
    import gc

    gc.collect()
    gc.freeze()  # the preloaded objects: not traversed by every child's gc.collect()
    preloaded = sorted({n.split(".")[0] for n in imported})
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(64)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin, selectors.EVENT_READ, "stdin")
    children: dict[int, socket.socket] = {}
    ready = {"cpu_s": round(time.process_time() - started, 2), "preloaded": len(imported)}
    print(json.dumps({"ready": ready, "notes": notes}), flush=True)
    while True:
        for key, _events in sel.select(timeout=0.05):
            if key.data == "stdin":
                if not os.read(sys.stdin.fileno(), 4096):  # verify has gone: end everything
                    for pid in children:
                        os.kill(pid, signal.SIGKILL)
                    return
            elif key.data == "accept":
                conn, _ = listener.accept()
                pid = _fork_request(conn, base_path, preloaded, listener, sel, children)
                if pid:
                    children[pid] = conn
                    sel.register(conn, selectors.EVENT_READ, pid)
            else:  # a client hung up before its child exited: the child goes too
                conn = key.fileobj
                assert isinstance(conn, socket.socket)
                if not conn.recv(1, socket.MSG_PEEK):
                    os.kill(key.data, signal.SIGKILL)
        _reap(children, sel)


def _reap(children: dict[int, socket.socket], sel: selectors.BaseSelector) -> None:
    while children:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        cpu = round(usage.ru_utime + usage.ru_stime, 2)
        sel.unregister(conn)
        with contextlib.suppress(OSError):
            send(conn, {"returncode": code, "cpu_s": cpu})
        conn.close()


def _fork_request(
    conn: socket.socket,
    base_path: list[str],
    preloaded: list[str],
    listener: socket.socket,
    sel: selectors.BaseSelector,
    children: dict[int, socket.socket],
) -> int:
    """Fork one child for the request on `conn`; its pid (0: the request was refused)."""
    try:
        request, fds = receive(conn)
    except (EOFError, OSError, ValueError) as exc:
        conn.close()
        print(f"forkserver: bad request: {exc}", file=sys.stderr, flush=True)
        return 0
    threads = _threads()
    if threads != 1 or len(fds) != 3:
        why = f"{threads} threads in the server" if threads != 1 else "3 stream fds expected"
        send(conn, {"error": f"refused to fork: {why}"})
        for fd in fds:
            os.close(fd)
        conn.close()
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            sel.close()
            listener.close()
            for other in children.values():
                other.close()
            conn.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            code = _run_child(request, base_path, preloaded)
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    send(conn, {"pid": pid})
    return pid


def _main(argv: list[str]) -> None:
    sock_path = argv[0]
    forbidden = argv[argv.index("--forbidden") + 1 : argv.index("--packages")]
    packages = argv[argv.index("--packages") + 1 : argv.index("--preload")]
    names = argv[argv.index("--preload") + 1 :]
    try:
        serve(sock_path, names, forbidden, packages)
    except ForkServerError as exc:
        print(f"forkserver: {exc}", file=sys.stderr, flush=True)
        os._exit(2)
    # No interpreter teardown: the frozen preloaded objects need no freeing (and some
    # extension modules complain about "leaks" when asked to).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    _main(sys.argv[1:])
