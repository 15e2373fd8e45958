"""The adapter pieces against NeMo-RL's real classes (one subprocess: `nemo_rl_pieces.py`).

- NeMo-RL's `ClippedPGLossFn` through `NemoRLLossSum` (two microbatch sums at counts 1, one
  division by the global token count) == the loss called once with the global counts;
- NeMo-RL's dataloader over `process_datum` yields our loop's step-1 prompts first;
- the environment's rewards for hand-written responses;
- the `MasterConfig` from NeMo-RL's example YAML + CPU overrides, and that the policy and
  generation adapters are concrete classes whose unsupported methods raise.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcore_grpo.grpo.nemo_rl import source

pytestmark = [
    pytest.mark.nemo_rl,
    pytest.mark.skipif(
        not source.is_available(),
        reason=f"NeMo-RL is not installed (no {source.CHECKOUT} when synced: run tools/apply_patches.sh, then uv sync)",
    ),
]

SCRIPT = Path(__file__).with_name("nemo_rl_pieces.py")


@pytest.fixture(scope="module")
def pieces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("nemo_rl_pieces") / "out.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(out)], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(out.read_text())


def test_nemo_rl_loss_through_the_adapter_equals_the_direct_call(pieces: dict[str, Any]) -> None:
    loss = pieces["loss"]
    assert loss["kl_nonzero"]  # the KL term is in play
    assert loss["loss_diff"] < 1e-6
    assert loss["grad_diff"] < 1e-6
    assert max(loss["metric_diff"].values()) < 1e-5, loss["metric_diff"]


def test_dataloader_yields_our_prompts_and_the_environment_scores_responses(
    pieces: dict[str, Any],
) -> None:
    data = pieces["data"]
    assert data["num_batches"] == 2
    assert data["first_batch_prompts_equal"]
    # digit d has id d + 3; <eos> 2, <pad> 0: "8 <eos>" exact, "8 <pad>" and "8 2 ..." partial.
    assert data["decoded"] == ["8 <eos>", "8 <pad>", "0", "", "8 <eos> 2"]
    assert data["rewards"] == [1.0, 0.5, 0.0, 0.0, 1.0]
    assert data["terminated"] == [True] * 5


def test_master_config_and_interfaces(pieces: dict[str, Any]) -> None:
    cfg = pieces["config"]
    assert cfg["backend"] == "megatron" and cfg["colocated"]
    assert cfg["stop_token_ids"] == [2] and cfg["pad_token_id"] == 0
    assert cfg["gbs"] == 64 and cfg["token_level_loss"] and cfg["kl_penalty"] == 0.01
    assert not cfg["policy_abstract"] and not cfg["generation_abstract"]
    assert cfg["unsupported_raised"] == cfg["unsupported_listed"]
    # NeMo-RL's own key reaches its grpo_train as the user typed it (its TimeoutChecker reads it)
    assert cfg["checkpoint_must_save_by"] == "00:01:02:03"
    assert cfg["default_must_save_by"] is None
    # grpo.reward_shaping and grpo.overlong_filtering reach NeMo-RL's grpo_train as typed.
    assert cfg["reward_shaping"]["enabled"] is True
    assert cfg["reward_shaping"]["stop_properly_penalty_coef"] == 0.25
    assert cfg["overlong_filtering"] is True
    assert cfg["default_reward_shaping"]["enabled"] is False
    # ... and policy.megatron_cfg.scheduler with optimizer.min_lr (NeMo-RL's recipe values).
    assert cfg["scheduler"]["lr_warmup_iters"] == 13
    assert cfg["scheduler"]["lr_warmup_init"] == 5e-7 == cfg["min_lr"]
    assert cfg["scheduler"]["lr_decay_style"] == "constant"
