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


# cpu-hf-tiny: a Hugging Face policy through Megatron-Bridge, every checkpoint with its HF
# export (save_consolidated), as the real-model presets save.
HF_PRESET = ("--preset", "cpu-hf-tiny")
HF_PERIOD = ["grpo.max_num_steps=4", "checkpointing.save_period=2"]


def _cli(
    out: Path,
    short: list[str],
    *extra: str,
    kill: str | None = None,
    period: list[str] = PERIOD,
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "mcore_grpo.cli", "--in-process", "--no-progress"]
    cmd += ["--output-dir", str(out), *extra, *short, *period]
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


def _run_hf_in_process(out: Path, overrides: list[str], *, resume: bool = False) -> None:
    """cpu-hf-tiny in this process, as `mcore-grpo --in-process` runs it (no start-up cost)."""
    from mcore_grpo.config.loader import load_config
    from mcore_grpo.grpo.driver.loop import GRPOLoop
    from mcore_grpo.grpo.policy_model.hf_model import resolve_model
    from mcore_grpo.grpo.ranks.messages import TaskTokens
    from mcore_grpo.grpo.ranks.runner import LocalRunner
    from mcore_grpo.grpo.tasks.math_task import make_task

    config = resolve_model(load_config(HF_PRESET[1], overrides=overrides), out)
    task = make_task(config)
    runner = LocalRunner(config, TaskTokens.of(task))
    try:
        GRPOLoop(config, task, runner, out).run(resume=resume, progress=False)
    finally:
        runner.shutdown()


@pytest.mark.timeout(600)
def test_a_hugging_face_preset_killed_mid_save_resumes_to_the_same_metrics(
    tmp_path: Path, short: list[str]
) -> None:
    """The real-model presets' checkpoints (a Bridge-converted HF policy, each save with its
    HF export): a run SIGKILLed while saving step 4 (rank files and export written,
    unpublished) has logged steps 1-4 as an uninterrupted run does; resumed (in this
    process, to keep the test short), it goes on from step 2 and logs steps 3-4 again,
    the same."""
    out = tmp_path / "run"
    assert (
        _cli(out, short, *HF_PRESET, kill="save:4", period=HF_PERIOD).returncode == -signal.SIGKILL
    )
    root = out / "checkpoints"
    assert list(root.glob("step_000004.tmp-*/hf")), "the kill did not land after the export"
    before = _metrics(out)
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [r["step"] for r in before] == [1, 2, 3, 4]
    _run_hf_in_process(out, [*short, *HF_PERIOD], resume=True)
    assert _metrics(out) == before
    # Steps 1-2 kept as logged (timings too), steps 3-4 run again (their timings differ).
    after = (out / "metrics.jsonl").read_text().splitlines()
    assert after[:2] == lines[:2] and after[2] != lines[2] and after[3] != lines[3]
    assert (root / "latest").read_text() == "step_000004"
    assert (root / "step_000004" / "hf" / "config.json").is_file()
    assert not list(root.glob("*.tmp-*"))
