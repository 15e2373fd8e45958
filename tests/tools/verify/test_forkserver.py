"""The fork server under verify: a child is a fresh interpreter's equivalent, the module-origin
guard refuses upstream code from the wrong tree, and a preload may not pull in upstream code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.patchtool.verify.forkclient import ForkServer
from tools.patchtool.verify.forkserver import (
    GUARD_EXIT,
    GUARD_VAR,
    REPORT_VAR,
    ForkServerError,
    guard_violations,
)
from tools.patchtool.verify.states import verify_preload


def _module(name: str, file: str | None) -> types.ModuleType:
    module = types.ModuleType(name)
    if file is not None:
        module.__file__ = file
    return module


def test_guard_accepts_upstream_modules_from_the_states_tree(tmp_path: Path) -> None:
    tree = tmp_path / "scratch" / "Up" / "series"
    modules = {
        "up": _module("up", None),  # a namespace package: no file
        "up.core": _module("up.core", str(tree / "up/core/__init__.py")),
        "up.stubbed": _module("up.stubbed", None),  # a test's stub: no file
        "json": json,
    }
    found = guard_violations(modules, {"Up": str(tree)}, {"Up": ["up"]}, [str(tmp_path)])
    assert found == []


def test_guard_refuses_an_upstream_module_from_another_tree(tmp_path: Path) -> None:
    """The left-out state must not import the patched module from the series tree (or from
    anywhere else): that would let a tripwire 'fail without the patch' for the wrong reason."""
    scratch = tmp_path / "scratch"
    own, other = scratch / "Up" / "without-fix", scratch / "Up" / "series"
    modules = {
        "up.core": _module("up.core", str(own / "up/core/__init__.py")),
        "up.core.fixed": _module("up.core.fixed", str(other / "up/core/fixed.py")),
    }
    found = guard_violations(modules, {"Up": str(own)}, {"Up": ["up"]}, [str(scratch)])
    assert len(found) == 2, found  # not in Up's tree; inside the scratch, outside the state
    assert all(line.startswith("up.core.fixed from ") for line in found)


def test_guard_refuses_any_module_from_the_users_checkout(tmp_path: Path) -> None:
    checkout = tmp_path / "3rdparty" / "Up"
    tree = tmp_path / "scratch" / "Up" / "series"
    modules = {"helper": _module("helper", str(checkout / "tools/helper.py"))}
    found = guard_violations(modules, {"Up": str(tree)}, {"Up": ["up"]}, [str(checkout)])
    assert found and "outside this state's trees" in found[0]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ForkServer]:
    """A server with nothing preloaded (fast), forbidding nothing."""
    srv = ForkServer(Path(sys.executable), tmp_path / "s.sock", [], [], [])
    try:
        yield srv
    finally:
        srv.close()


PROBE = "import json, os, sys; print(json.dumps([sys.path, os.getcwd(), os.environ.get('X')]))"


def test_child_sees_what_a_fresh_interpreter_sees(server: ForkServer, tmp_path: Path) -> None:
    """Same sys.path (PYTHONPATH included), working directory and environment as
    `python -c` started with the same environment."""
    extra = tmp_path / "extra"
    extra.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(extra), X="42")
    fresh = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    child = server.spawn(["-c", PROBE], env, tmp_path)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert json.loads(out) == json.loads(fresh.stdout)


def test_child_exit_status_and_failure_are_reported(server: ForkServer, tmp_path: Path) -> None:
    child = server.spawn(
        ["-c", "import sys; print('out'); sys.exit(3)"], dict(os.environ), tmp_path
    )
    assert child.communicate(timeout=60)[0] == "out\n" and child.returncode == 3
    child = server.spawn(["-c", "raise ValueError('boom')"], dict(os.environ), tmp_path)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 1 and "ValueError: boom" in err


# A state whose multiprocessing child outlives it (a rank of a failed two-rank test, waiting
# for its dead peer): multiprocessing's exit handler would join it forever.
LEFTOVER = """
import multiprocessing, time
ctx = multiprocessing.get_context("fork")
ctx.Process(target=time.sleep, args=(3600,)).start()
print("started")
"""


def test_a_child_process_left_running_by_the_state_is_killed(
    server: ForkServer, tmp_path: Path
) -> None:
    child = server.spawn(["-c", LEFTOVER], dict(os.environ), tmp_path)
    out, err = child.communicate(timeout=60)
    assert out == "started\n" and child.returncode == 0, err
    assert "killed a child process the state left running" in err


def test_child_importing_from_the_wrong_tree_trips_the_guard(
    server: ForkServer, tmp_path: Path
) -> None:
    """A child importing the upstream package from outside its state's tree exits with
    GUARD_EXIT and says what it imported from where, also in the state's report file."""
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    for tree in (right, wrong):
        (tree / "up").mkdir(parents=True)
        (tree / "up" / "__init__.py").write_text(f"WHERE = {tree.name!r}\n")
    report = tmp_path / "report.txt"
    guard = {"trees": {"Up": str(right)}, "packages": {"Up": ["up"]}, "forbidden": []}
    env = dict(os.environ, PYTHONPATH=str(wrong), **{GUARD_VAR: json.dumps(guard)})
    env[REPORT_VAR] = str(report)
    child = server.spawn(["-c", "import up; print(up.WHERE)"], env, tmp_path)
    out, err = child.communicate(timeout=60)
    assert out == "wrong\n"
    assert child.returncode == GUARD_EXIT, err
    assert f"up from {wrong / 'up' / '__init__.py'}" in err
    assert "not from Up's tree" in report.read_text()
    env["PYTHONPATH"] = str(right)
    report.unlink()
    child = server.spawn(["-c", "import up; print(up.WHERE)"], env, tmp_path)
    out, err = child.communicate(timeout=60)
    assert (out, child.returncode) == ("right\n", 0), err
    assert not report.exists()


def test_preloading_an_upstream_package_is_refused(tmp_path: Path) -> None:
    """Only third-party modules may be imported before the fork: an upstream package (here
    `json`, named as one) is refused and the server does not start."""
    with pytest.raises(ForkServerError, match="before it was ready"):
        ForkServer(Path(sys.executable), tmp_path / "s.sock", ["json"], [], ["json"])


@pytest.mark.slow
def test_the_projects_preload_leaves_the_server_able_to_fork(tmp_path: Path) -> None:
    """The server forks only while single-threaded; a preloaded module that starts a thread
    at import (pyarrow's jemalloc purge thread, once datasets was installed) made every verify
    state fail with "refused to fork". The real list, the real environment."""
    root = Path(__file__).resolve().parents[3]
    srv = ForkServer(Path(sys.executable), tmp_path / "s.sock", verify_preload(root), [], [])
    try:
        child = srv.spawn(["-c", "print('forked')"], dict(os.environ), tmp_path)
        out, err = child.communicate(timeout=300)
    finally:
        srv.close()
    assert child.returncode == 0 and out == "forked\n", err[-2000:]


def test_a_preload_that_prints_at_import_leaves_the_server_ready(tmp_path: Path) -> None:
    """The readiness line is the server's stdout; a module printing while it is imported
    (`this` prints the Zen of Python; megatron-core and Bridge log to stdout) goes to stderr
    instead of being read as the answer."""
    srv = ForkServer(Path(sys.executable), tmp_path / "s.sock", ["this"], [], [])
    try:
        assert srv.ready["ready"]["preloaded"] == 1
        child = srv.spawn(["-c", "print('forked')"], dict(os.environ), tmp_path)
        assert child.communicate(timeout=60)[0] == "forked\n"
    finally:
        srv.close()
