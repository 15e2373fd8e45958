"""`cpu-moe` at expert parallelism 2 on 2 Ray workers, under both drivers: reward rises, and
the router metrics reach metrics.jsonl and the plot (ours) or NeMo-RL's own logger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli_run import mean, needs_nemo_rl, run_cli

CPU_RUN = "the cpu-moe preset on Ray CPU actors (gloo)"
STEPS = 30
EP2 = ["--workers", "2", "policy.megatron_cfg.expert_model_parallel_size=2"]


def _cli(tmp_path: Path, *args: str) -> str:
    return run_cli(tmp_path, "--preset", "cpu-moe", "--no-progress", *args)


@pytest.mark.slow
@pytest.mark.cpu_only(reason=CPU_RUN)
@pytest.mark.timeout(1800)
def test_cpu_moe_at_ep2_learns_and_logs_the_router(tmp_path: Path) -> None:
    out = tmp_path / "run"
    log = _cli(tmp_path, *EP2, "--output-dir", str(out), f"grpo.max_num_steps={STEPS}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["reward_mean"] for r in records]
    print(f"cpu-moe EP=2: reward {mean(rewards[:5]):.3f} -> {mean(rewards[-5:]):.3f}")
    assert mean(rewards[-5:]) > mean(rewards[:5]) + 0.2, rewards
    samples = 16 * 16  # cpu-tiny's prompts x generations, every one trained once
    for r in records:
        tokens = r["moe/tokens_per_expert"]
        assert len(tokens) == 4 and min(tokens) > 0
        # Every token of every trained sequence is routed to top-2 experts in each of 2 layers.
        assert sum(tokens) % (samples * 2 * 2) == 0
        assert r["moe/dropped_tokens"] == 0.0
        assert r["moe/load_imbalance"] >= 1.0
        assert r["moe/load_balancing_loss"] > 0.0 and r["moe/z_loss"] > 0.0
    assert "| aux " in log and "imbalance" in log  # the step line
    assert (out / "reward_loss.png").stat().st_size > 10_000


@pytest.mark.slow
@pytest.mark.cpu_only(reason=CPU_RUN)
@needs_nemo_rl
@pytest.mark.timeout(1800)
def test_grpo_train_drives_cpu_moe_at_ep2_and_logs_moe_metrics(tmp_path: Path) -> None:
    from mcore_grpo.nemo_rl_driver.run_metrics import read_scalars

    out = tmp_path / "run"
    log = _cli(
        tmp_path,
        "--driver",
        "nemo-rl",
        *EP2,
        "--output-dir",
        str(out),
        f"grpo.max_num_steps={STEPS}",
    )
    assert "driver nemo-rl" in log
    held = (out / "upstream-logs" / "driver.log").read_text()  # grpo_train's prints (issue 46)
    assert "Max number of steps has been reached" in held  # grpo_train's own last words
    scalars = read_scalars(out / "logs")
    rewards = [value for _, value in scalars["train/reward"]]
    print(f"cpu-moe nemo-rl EP=2: reward {mean(rewards[:5]):.3f} -> {mean(rewards[-5:]):.3f}")
    assert mean(rewards[-5:]) > mean(rewards[:5]) + 0.2, rewards
    # grpo_train logs the worker's moe_metrics under moe/ (grpo.py), prefixed train/.
    for name in ("load_balancing_loss", "z_loss", "load_imbalance", "dropped_tokens"):
        assert len(scalars[f"train/moe/{name}"]) == STEPS, sorted(scalars)
