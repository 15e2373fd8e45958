"""Ray runner: 2 workers reproduce 1 worker; a worker that raises ends the run promptly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcore_grpo.config.loader import load_config
from mcore_grpo.grpo.driver.loop import GRPOLoop
from mcore_grpo.grpo.ranks.messages import TaskTokens
from mcore_grpo.grpo.ranks.runner import LocalRunner, RayRunner
from mcore_grpo.grpo.tasks.task import build_task

pytestmark = [
    pytest.mark.cpu_only(reason="runs the cpu-tiny preset (policy.device=cpu) on Ray CPU workers"),
    pytest.mark.slow,
]


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.timeout(600)
def test_two_ray_workers_match_one_worker(
    tmp_path: Path, short: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config(overrides=short)
    monkeypatch.chdir(tmp_path)  # a relative --output-dir must reach the actors resolved
    task = build_task(config.task.name)
    tokens = TaskTokens(task.vocab_size, task.pad_id, task.eos_id)

    local = LocalRunner(config, tokens)
    try:
        GRPOLoop(config, task, local, tmp_path / "one").run(progress=False)
    finally:
        local.shutdown()
    ray_runner = RayRunner(config, tokens, 2)
    try:
        GRPOLoop(config, task, ray_runner, Path("two")).run(progress=False)
    finally:
        ray_runner.shutdown()

    one, two = _records(tmp_path / "one/metrics.jsonl"), _records(tmp_path / "two/metrics.jsonl")
    assert [r["workers"] for r in two] == [2, 2, 2]
    for a, b in zip(one, two, strict=True):
        # Same samples (sampling is seeded per prompt group, not per worker) ...
        assert a["reward_mean"] == b["reward_mean"]
        assert a["response_tokens_mean"] == b["response_tokens_mean"]
        # ... and the same loss, KL and gradient norm up to float reassociation.
        for key in ("loss", "kl", "kl_penalty", "token_mult_prob_error", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (a["step"], key)
    # Both ranks' optimizer shards and the reference landed in one published checkpoint.
    ckpt = tmp_path / "two/checkpoints/step_000003"
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "meta.json",
        "rank_00000.pt",
        "rank_00001.pt",
        "reference.pt",
    ]


@pytest.mark.timeout(600)
def test_worker_raising_at_step_2_ends_run_promptly(tmp_path: Path, short: list[str]) -> None:
    env = dict(os.environ, MCORE_GRPO_INJECT_FAILURE="1:2")
    cmd = [sys.executable, "-m", "mcore_grpo.cli", "--workers", "2", "--no-progress"]
    cmd += ["--output-dir", str(tmp_path / "run"), *short]
    # stderr goes to a file, not a pipe: Ray and megatron-core write a lot there, and a full pipe
    # nobody reads would block the run before it prints step 1.
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("w") as stderr_file:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr_file, text=True, env=env)
    assert proc.stdout is not None
    step1_at = None
    for line in proc.stdout:
        if line.startswith("step   1/"):
            step1_at = time.monotonic()
            break
    if step1_at is None:
        proc.wait(timeout=60)
        pytest.fail(f"the run never finished step 1:\n{stderr_path.read_text()[-3000:]}")
    try:
        proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the run hung after a worker failed")
    elapsed = time.monotonic() - step1_at
    stderr = stderr_path.read_text()
    assert proc.returncode == 1
    assert "worker rank 1 failed in generate" in stderr
    assert "injected failure in generate at step 2 on rank 1" in stderr
    # The worker's own traceback is shown (its frames, down to the raising function).
    assert "rank.py" in stderr and "in _maybe_fail" in stderr
    assert elapsed < 30, f"run took {elapsed:.1f}s to end after the failure"
    assert not (tmp_path / "run/checkpoints").exists()
