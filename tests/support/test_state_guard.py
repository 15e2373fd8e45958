"""The state guard (state_guard.py): a test or a wider fixture that leaves process-wide state
changed fails, naming what; a fixture that restores what it changed passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.state_guard import PRISTINE, UNSET, Footprint, Snapshot, changed

REPO = Path(__file__).resolve().parents[2]
PLAIN = ["-p", "no:randomly", "-p", "no:cacheprovider", "-q", "-rE"]  # in file order, no cache

LEAKY_TESTS = """
import os
import signal
import pytest

def test_leaves_a_variable():
    os.environ["STATE_GUARD_PROBE"] = "1"

def test_restores_its_variable(monkeypatch):
    monkeypatch.setenv("STATE_GUARD_PROBE", "2")

def test_leaves_a_signal_handler():
    signal.signal(signal.SIGHUP, lambda *_: None)

def test_leaves_the_working_directory(tmp_path):
    os.chdir(tmp_path)

def test_after_the_leaks_sees_them_put_back():
    assert "STATE_GUARD_PROBE" not in os.environ

@pytest.fixture(scope="module")
def shared():
    os.environ["STATE_GUARD_MODULE"] = "1"
    yield

@pytest.fixture(scope="module")
def shared_restored():
    os.environ["STATE_GUARD_KEPT"] = "1"
    yield
    del os.environ["STATE_GUARD_KEPT"]

def test_uses_a_leaky_module_fixture(shared):
    pass

def test_uses_a_restoring_module_fixture(shared_restored):
    assert os.environ["STATE_GUARD_KEPT"] == "1"
"""


def _run(tmp_path: Path) -> str:
    (tmp_path / "test_leaky.py").write_text(LEAKY_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not this repository's addopts
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("STATE_GUARD_PROBE", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.support.state_guard",
            *PLAIN,
            "test_leaky.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.stdout + proc.stderr


def test_each_leak_fails_its_own_test_naming_what_it_changed(tmp_path: Path) -> None:
    out = _run(tmp_path)
    assert "test_leaves_a_variable left process-wide state changed" in out
    assert "os.environ[STATE_GUARD_PROBE]: '<unset>' -> '1'" in out
    assert "test_leaves_a_signal_handler left process-wide state changed" in out
    assert "signal handler SIGHUP" in out
    assert "test_leaves_the_working_directory left process-wide state changed" in out
    assert "fixture 'shared of test_leaky.py (module)' left changed what it set up" in out
    assert "os.environ[STATE_GUARD_MODULE]" in out
    for clean in ("test_restores_its_variable", "test_after_the_leaks_sees_them_put_back"):
        assert f"ERROR test_leaky.py::{clean}" not in out, out
    assert "STATE_GUARD_KEPT" not in out, out
    assert "7 passed, 4 errors" in out, out


def test_a_module_first_imported_is_compared_with_its_fresh_state() -> None:
    """A key the test made appear (torch.distributed imported and initialized by the test)
    counts against PRISTINE; one with nothing to compare with (a registry) does not."""
    key = "torch.distributed"
    assert changed({}, {key: "initialized: backend gloo, rank 0 of 1"}) == {
        key: (PRISTINE[key], "initialized: backend gloo, rank 0 of 1")
    }
    assert changed({}, {key: PRISTINE[key]}) == {}
    assert changed({}, {"tools.patchtool.source.mirror._active": []}) == {}
    assert changed({}, {"os.environ[X]": "1"}) == {"os.environ[X]": (UNSET, "1")}


def test_what_an_import_does_for_good_is_excused_in_the_test_that_imports() -> None:
    before: Snapshot = {"imported": [], "os.environ[RAY_CLIENT_MODE]": UNSET}
    after: Snapshot = {"imported": ["ray"], "os.environ[RAY_CLIENT_MODE]": "0"}
    assert changed(before, after) == {}
    after_again: Snapshot = {"imported": ["ray"], "os.environ[RAY_CLIENT_MODE]": "1"}
    assert changed(after, after_again) == {"os.environ[RAY_CLIENT_MODE]": ("0", "1")}


def test_a_fixtures_own_path_entry_counts_not_what_imports_added_meanwhile() -> None:
    """A session fixture puts its root on sys.path; ray's import adds its own later. Taking the
    root off again restores what the fixture changed; leaving it on does not."""
    before: Snapshot = {"sys.path": ["/lib"]}
    set_up: Snapshot = {"sys.path": ["/lib", "/nemo-rl"]}
    footprint = Footprint("nemo_rl_on_path (session)", before, set_up, {"sys.path"})
    assert footprint.left({"sys.path": ["/lib", "/ray/thirdparty_files"]}) == {}
    left = footprint.left({"sys.path": ["/lib", "/nemo-rl", "/ray/thirdparty_files"]})
    assert list(left) == ["sys.path"]
