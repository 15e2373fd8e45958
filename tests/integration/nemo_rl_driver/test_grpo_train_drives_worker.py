"""NeMo-RL's `grpo_train` drives the worker: 30 steps, 2 Ray actors, CPU/gloo, reward rises.

Runs ``python -m mcore_grpo.cli --driver nemo-rl --workers 2`` on the cpu-tiny preset in a
subprocess (importing NeMo-RL has process-wide side effects; this is also what a user runs),
then reads the rewards NeMo-RL's own `Logger` wrote (its tensorboard backend) and the
checkpoint NeMo-RL's `CheckpointManager` published.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcore_grpo.nemo_rl_driver.run_metrics import read_scalars

from tests.support.cli_run import needs_nemo_rl, run_cli

pytestmark = [
    pytest.mark.slow,
    pytest.mark.cpu_only(reason="the cpu-tiny preset on Ray CPU actors (gloo)"),
]

STEPS = 30


@needs_nemo_rl
@pytest.mark.timeout(1800)
def test_grpo_train_runs_30_steps_on_two_workers_and_the_reward_rises(tmp_path: Path) -> None:
    out = tmp_path / "run"
    log = run_cli(
        tmp_path,
        "--driver",
        "nemo-rl",
        "--workers",
        "2",
        "--output-dir",
        str(out),
        "--no-progress",
        f"grpo.max_num_steps={STEPS}",
    )
    assert "driver nemo-rl: nemo_rl.algorithms.grpo.grpo_train from" in log
    # grpo_train's own prints are held back with the upstream logs (issue 46), not printed.
    assert "Max number of steps has been reached" not in log
    held = (out / "upstream-logs" / "driver.log").read_text()
    assert "Max number of steps has been reached" in held  # grpo_train's own last words

    scalars = read_scalars(out / "logs")
    rewards = [value for _, value in scalars["train/reward"]]
    assert [step for step, _ in scalars["train/reward"]] == list(range(1, STEPS + 1))
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last > first + 0.2, rewards
    # The loss is NeMo-RL's ClippedPGLossFn with its KL term, trained by the worker.
    assert all(v > 0 for _, v in scalars["train/kl_penalty"][1:]), scalars["train/kl_penalty"]
    assert len(scalars["train/grad_norm"]) == STEPS

    # NeMo-RL's CheckpointManager published the last step with both ranks' weights.
    ckpt = out / "checkpoints" / f"step_{STEPS}"
    assert sorted(p.name for p in (ckpt / "policy" / "weights").iterdir()) == [
        "rank_00000.pt",
        "rank_00001.pt",
    ]
    assert (ckpt / "training_info.json").is_file()
