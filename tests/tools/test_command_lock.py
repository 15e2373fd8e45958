"""Two tools/patches commands on one checkout: the second refuses, never interleaves; a
crashed holder (SIGKILL) leaves no stuck lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tools import faulty_git
from tests.tools.sandbox import REPO_ROOT, Sandbox, run
from tools.patchtool.command_lock import command_lock, holders_dir, live_holders, lock_path
from tools.patchtool.errors import PatchToolError

TOOL = [sys.executable, str(REPO_ROOT / "tools" / "patches")]


def _superproject(sandbox: Sandbox) -> tuple[Path, str]:
    repo, pin = sandbox.upstream("Up", {"mod.py": "VALUE = 1\n"})
    patch = sandbox.make_patch(repo, pin, {"mod.py": "VALUE = 2\n"}, "Fix")
    sandbox.add("Up", str(repo), pin)
    sandbox.set_series("Up", {"fix.patch": patch})
    sandbox.commit()
    return sandbox.root / "3rdparty/Up", pin


def _start(root: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*TOOL, "--root", str(root), *args],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _wait_for_holder(root: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if any(h.startswith(f"apply, pid {proc.pid},") for h in live_holders(root)):
            return
        time.sleep(0.05)
    pytest.fail(f"the first apply never took the lock: {proc.communicate()}")


@pytest.mark.parametrize("second", ["apply", "reset", "verify"])
def test_second_command_refuses_while_an_apply_runs(
    sandbox: Sandbox, tmp_path: Path, second: str
) -> None:
    checkout, _ = _superproject(sandbox)
    env = dict(os.environ, **faulty_git.install(tmp_path / "bin", "slow_am"), FAULTY_GIT_SLEEP="3")
    first = _start(sandbox.root, "apply", env=env)
    _wait_for_holder(sandbox.root, first)
    other = subprocess.run(
        [
            *TOOL,
            "--root",
            str(sandbox.root),
            second,
            *(["--python", sys.executable] if second == "verify" else []),
        ],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert other.returncode == 1
    line = other.stderr.strip().splitlines()[-1]
    assert "another tools/patches command is running on this checkout (apply, pid" in line
    assert f"re-run {second}" in line
    _out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert (checkout / "mod.py").read_text() == "VALUE = 2\n"  # the first apply, whole
    assert run(checkout, "status", "--porcelain") == ""


def test_a_sigkilled_holder_leaves_no_stuck_lock(sandbox: Sandbox, tmp_path: Path) -> None:
    checkout, pin = _superproject(sandbox)
    mark = tmp_path / "am-started"
    env = dict(
        os.environ,
        **faulty_git.install(tmp_path / "bin", "slow_am"),
        FAULTY_GIT_SLEEP="30",
        FAULTY_GIT_MARK=str(mark),
    )
    first = _start(sandbox.root, "apply", env=env)
    _wait_for_holder(sandbox.root, first)
    # Kill while `git am` sleeps, not during the real git calls before it (a checkout killed
    # mid-write leaves git's own index.lock, which git, not this lock, asks the user to remove).
    faulty_git.wait_for_mark(mark, first)
    os.killpg(first.pid, signal.SIGKILL)  # the run and its git, as the OOM killer would
    first.communicate()
    assert run(checkout, "rev-parse", "HEAD") == pin  # killed before git am began
    again = subprocess.run(
        [*TOOL, "--root", str(sandbox.root), "apply"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert (checkout / "mod.py").read_text() == "VALUE = 2\n"


def test_readers_share_and_exclude_writers(tmp_path: Path) -> None:
    """In one process: two readers (verify, export --check) at once; a writer refused beside
    them; the holder's name in the message."""
    (tmp_path / ".git").mkdir()
    with (
        command_lock(tmp_path, "verify"),
        command_lock(tmp_path, "export", reading=True),
        pytest.raises(
            PatchToolError,
            match=r"\(verify, pid \d+, since [\d:]+; export \(reading\), pid \d+, since [\d:]+; "
            r"lock .*re-run apply",
        ),
        command_lock(tmp_path, "apply"),
    ):
        pass
    with (
        command_lock(tmp_path, "apply"),
        command_lock(tmp_path, "status"),  # read-only commands take no lock
        pytest.raises(PatchToolError, match=r"\(apply, pid \d+"),
        command_lock(tmp_path, "verify"),
    ):
        pass


def test_lock_lives_in_a_worktrees_own_git_dir(sandbox: Sandbox, tmp_path: Path) -> None:
    (tmp_path / "main").mkdir()
    run(tmp_path / "main", "init", "-q", "-b", "main")
    run(tmp_path / "main", "commit", "-q", "--allow-empty", "-m", "x")
    run(tmp_path / "main", "worktree", "add", "-q", str(tmp_path / "wt"))
    assert lock_path(tmp_path / "wt").parent == Path(
        run(tmp_path / "wt", "rev-parse", "--absolute-git-dir")
    )


def test_the_refusal_names_the_live_holder_not_an_earlier_one(tmp_path: Path) -> None:
    """An apply that has ended, then a verify that runs: a second apply is refused naming the
    verify, never the finished apply; a record left by a dead process is dropped; with no live
    record the refusal says it cannot tell."""
    (tmp_path / ".git").mkdir()
    with command_lock(tmp_path, "apply"):
        pass
    assert live_holders(tmp_path) == []
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    stale = holders_dir(tmp_path) / f"{ended}-0"
    stale.write_text(f"apply, pid {ended}, since 13:13:38")
    with command_lock(tmp_path, "verify"):
        with pytest.raises(PatchToolError) as refused, command_lock(tmp_path, "apply"):
            pass
        assert f"(verify, pid {os.getpid()}, since" in str(refused.value)
        assert "13:13:38" not in str(refused.value)
        assert not stale.exists()
        for record in holders_dir(tmp_path).iterdir():
            record.unlink()
        with (
            pytest.raises(PatchToolError, match=r"\(which one cannot be told; lock "),
            command_lock(tmp_path, "apply"),
        ):
            pass
