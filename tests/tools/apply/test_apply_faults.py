"""A failing git during apply (a full disk, a write refused) leaves every checkout as it was:
HEAD, branches, refs, index, worktree, no `git am` in progress."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cpu_load import cpu_burners, load_average
from tests.tools import faulty_git
from tests.tools.sandbox import REPO_ROOT, Sandbox, lines, run

TOOL = [sys.executable, str(REPO_ROOT / "tools" / "patches")]


def _state(checkout: Path) -> dict[str, str]:
    """Everything apply promises to restore."""
    return {
        "head": run(checkout, "rev-parse", "HEAD"),
        "symbolic": run(checkout, "rev-parse", "--symbolic-full-name", "HEAD"),
        "refs": run(checkout, "for-each-ref", "--format=%(refname) %(objectname)"),
        "status": run(checkout, "status", "--porcelain", "--ignored"),
        "am": str(
            (Path(run(checkout, "rev-parse", "--absolute-git-dir")) / "rebase-apply").exists()
        ),
    }


@pytest.mark.parametrize("mode", ["enospc_after_am", "fsize_am"])
def test_failing_git_during_apply_leaves_every_checkout_as_it_was(
    sandbox: Sandbox, tmp_path: Path, mode: str
) -> None:
    """Two upstreams: `Up` applies, then git fails while applying `Dn`'s series (large enough
    that a 1 KiB file-size limit refuses git's writes). `Dn` is exactly as before the run;
    `Up` is applied whole (each checkout is atomic on its own); a re-run with a healthy git
    finishes the job."""
    big = lines(400, "value")
    states = {}
    for name in ("Up", "Dn"):
        repo, pin = sandbox.upstream(name, {"mod.py": big})
        changed = big.replace("value 7\n", "fixed 7\n").replace("value 300\n", "fixed 300\n")
        patch = sandbox.make_patch(repo, pin, {"mod.py": changed, "new.py": lines(200)}, "Fix")
        sandbox.add(name, str(repo), pin)
        sandbox.set_series(name, {"fix.patch": patch})
    sandbox.commit()
    for name in ("Up", "Dn"):
        states[name] = _state(sandbox.root / f"3rdparty/{name}")
    env = dict(os.environ, **faulty_git.install(tmp_path / "bin", mode), FAULTY_GIT_ONLY="/Dn")
    proc = subprocess.run(
        [*TOOL, "--root", str(sandbox.root), "apply"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "checkout restored" in proc.stderr
    why = {"enospc_after_am": "No space left on device", "fsize_am": "died of signal 25"}
    assert why[mode] in proc.stderr  # git's own failure reaches the user (25: SIGXFSZ)
    dn = sandbox.root / "3rdparty/Dn"
    assert _state(dn) == states["Dn"]
    up = sandbox.root / "3rdparty/Up"
    assert "fixed 300\n" in (up / "mod.py").read_text() and (up / "new.py").exists()
    assert run(up, "status", "--porcelain") == ""
    healthy = subprocess.run(
        [*TOOL, "--root", str(sandbox.root), "apply"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert healthy.returncode == 0, healthy.stderr
    assert "fixed 300\n" in (dn / "mod.py").read_text()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_interrupted_apply_ends_within_seconds_and_restores_the_checkout(
    sandbox: Sandbox, tmp_path: Path, sig: signal.Signals
) -> None:
    """An apply interrupted while `git am` runs (here: a git that sleeps first), started as a
    background job (SIGINT inherited ignored), on a machine loaded twice per core: it exits 130
    within 15 s and the checkout is as it was."""
    repo, pin = sandbox.upstream("Up", {"mod.py": "VALUE = 1\n"})
    sandbox.add("Up", str(repo), pin)
    sandbox.set_series(
        "Up", {"fix.patch": sandbox.make_patch(repo, pin, {"mod.py": "VALUE = 2\n"}, "Fix")}
    )
    sandbox.commit()
    checkout = sandbox.root / "3rdparty/Up"
    before = _state(checkout)
    mark = tmp_path / "am-started"
    env = dict(
        os.environ,
        **faulty_git.install(tmp_path / "bin", "slow_am"),
        FAULTY_GIT_SLEEP="60",
        FAULTY_GIT_MARK=str(mark),
    )
    proc = subprocess.Popen(
        [*TOOL, "--root", str(sandbox.root), "apply"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    faulty_git.wait_for_mark(mark, proc)  # inside the slow `git am`
    with cpu_burners():
        sent = time.monotonic()
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        latency = time.monotonic() - sent
    print(f"apply ended {latency:.2f} s after {sig.name} (load average {load_average():.1f})")
    assert proc.returncode == 130, err
    # Half the planted hang (git am sleeps 60 s), not a machine-speed figure (see verify's).
    assert latency < 30, f"apply took {latency:.1f} s to end after {sig.name}"
    assert _state(checkout) == before
