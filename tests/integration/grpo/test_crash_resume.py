"""Crash-safe GRPO: a run SIGKILLed mid-step or mid-save resumes from the last complete
checkpoint and logs exactly the metrics of a run that was never interrupted; an interrupt
(SIGINT/SIGTERM) ends a Ray run within a few seconds, also on a loaded machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cpu_load import cpu_burners, load_average

pytestmark = [
    pytest.mark.cpu_only(reason="runs the cpu-tiny preset (policy.device=cpu)"),
    pytest.mark.slow,
]

# Timings differ between any two runs; every other metric must be bit-identical.
TIMINGS = {"generation_time_s", "logprob_time_s", "training_time_s", "step_time_s"}
PERIOD = ["grpo.max_num_steps=6", "checkpointing.save_period=2"]


def _cli(
    out: Path, short: list[str], *extra: str, kill: str | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "mcore_grpo.cli", "--in-process", "--no-progress"]
    cmd += ["--output-dir", str(out), *extra, *short, *PERIOD]
    env = dict(os.environ)
    env.pop("MCORE_GRPO_INJECT_KILL", None)
    if kill:
        env["MCORE_GRPO_INJECT_KILL"] = kill
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)


def _metrics(out: Path) -> list[dict]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in records]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    from tests.integration.grpo.conftest import SHORT

    out = tmp_path_factory.mktemp("uninterrupted")
    assert _cli(out, list(SHORT)).returncode == 0
    return _metrics(out)


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("kill", "resumes_after"),
    [("step:5", 4), ("save:4", 2)],
    ids=["mid-step", "mid-save"],
)
def test_sigkill_then_resume_matches_the_uninterrupted_run(
    tmp_path: Path, short: list[str], uninterrupted: list[dict], kill: str, resumes_after: int
) -> None:
    out = tmp_path / "run"
    assert _cli(out, short, kill=kill).returncode == -signal.SIGKILL
    root = out / "checkpoints"
    if kill.startswith("save"):
        assert list(root.glob("step_000004.tmp-*")), "the kill did not land mid-save"
    resumed = _cli(out, short, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resumed from step {resumes_after}" in resumed.stdout
    log = (out / "metrics.jsonl").read_text()
    assert log.count('"step": 3,') == 1  # redone steps replace the lost ones, no duplicates
    assert _metrics(out) == uninterrupted
    assert (root / "latest").read_text() == "step_000006"
    assert not list(root.glob("*.tmp-*"))
    kept = sorted(p.name for p in root.glob("step_*"))
    assert kept == ["step_000002", "step_000004", "step_000006"]  # keep_top_k=3


@pytest.mark.timeout(600)
def test_interrupt_ends_a_ray_run_within_seconds_on_a_loaded_machine(
    tmp_path: Path, short: list[str]
) -> None:
    """SIGINT to a run started as a background job (SIGINT inherited ignored) while every core
    is busy twice over: exit 130 within 15 s, the Ray workers gone, the checkpoint resumable."""
    cmd = [sys.executable, "-m", "mcore_grpo.cli", "--no-progress", "--output-dir"]
    cmd += [str(tmp_path / "run"), *short, "grpo.max_num_steps=40", "checkpointing.save_period=2"]
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("w") as stderr_file:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=stderr_file,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("step   3/"):
            break
    else:
        proc.wait(timeout=60)
        pytest.fail(f"the run never reached step 3:\n{stderr_path.read_text()[-3000:]}")
    with cpu_burners():
        time.sleep(2)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        finally:
            proc.kill()
        latency = time.monotonic() - sent
    print(f"mcore-grpo ended {latency:.2f} s after SIGINT (load average {load_average():.1f})")
    assert proc.returncode == 130, stderr_path.read_text()[-2000:]
    assert latency < 15, f"the run took {latency:.1f} s to end after SIGINT"
    assert "--resume" in stderr_path.read_text()
    from mcore_grpo.grpo.driver.checkpoint import find_latest

    assert find_latest(tmp_path / "run").step >= 2
