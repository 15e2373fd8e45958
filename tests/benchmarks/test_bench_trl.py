"""benchmarks/bench_trl.py: its command line and the TRL settings it derives from the preset
(no model is loaded, nothing trains)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from mcore_grpo.config.loader import load_config

from benchmarks import bench_trl


def _config(*overrides: str) -> object:
    args = bench_trl.parse_args(["--steps", "3", *overrides])
    return load_config(bench_trl.PRESET, None, bench_trl.bench_overrides(args))


def test_arguments_and_overrides() -> None:
    args = bench_trl.parse_args(
        ["--steps", "2", "--side", "trl", "--threads", "1", "grpo.num_prompts_per_step=4"]
    )
    assert (args.steps, args.side, args.threads) == (2, "trl", 1)
    assert args.overrides == ["grpo.num_prompts_per_step=4"]
    assert bench_trl.grpo_steps(args) == 3  # one warm-up step
    overrides = bench_trl.bench_overrides(args)
    assert overrides[-1] == "grpo.num_prompts_per_step=4"  # the user's come last
    assert "checkpointing.enabled=false" in overrides
    accuracy = bench_trl.parse_args(["--accuracy-minutes", "1", "--eval-size", "8"])
    assert bench_trl.grpo_steps(accuracy) == bench_trl.ACCURACY_STEP_BOUND
    with pytest.raises(SystemExit):
        bench_trl.parse_args(["not-an-override"])
    with pytest.raises(SystemExit):
        bench_trl.parse_args(["--steps", "0"])


def test_preset_maps_to_trl_settings() -> None:
    """8 x 8 samples, 32 per optimizer step: 2 optimizer steps per generation of 64."""
    s = bench_trl.trl_settings(_config(), 4)
    assert s["per_device_train_batch_size"] == 8
    assert s["per_device_train_batch_size"] * s["gradient_accumulation_steps"] == 32
    assert s["per_device_train_batch_size"] * s["steps_per_generation"] == 64
    assert s["steps_per_generation"] // s["gradient_accumulation_steps"] == 2
    assert s["num_generations"] == 8 and s["num_iterations"] == 1
    assert s["max_steps"] == 2 * 4
    assert (s["max_completion_length"], s["temperature"], s["learning_rate"]) == (48, 1.0, 5e-6)
    assert (s["beta"], s["loss_type"], s["scale_rewards"]) == (0.01, "dapo", "group")
    assert s["weight_decay"] == 0.01 and s["mask_truncated_completions"] is False
    assert not s["shuffle_dataset"]
    assert not (s["gradient_checkpointing"] or s["bf16"])  # fp32, no recompute, as ours


def test_trls_rewards_are_shaped_as_ours() -> None:
    """The preset's stop penalty (0): a completion not ended by EOS (2) scores 0 on TRL's
    side too; off, the verifier's scores pass through."""
    ids = [[5, 6, 2], [5, 6, 7], [5, 2]]
    scores = [1.0, 1.0, 0.0]
    assert bench_trl.shaped_rewards(scores, ids, (2,), _config()) == [1.0, 0.0, 0.0]
    off = _config("grpo.reward_shaping.enabled=false")
    assert bench_trl.shaped_rewards(scores, ids, (2,), off) == scores


def test_shape_trl_cannot_express_is_refused() -> None:
    policy = SimpleNamespace(train_global_batch_size=32, train_micro_batch_size=12)
    with pytest.raises(ValueError, match="TRL needs"):
        bench_trl.optimizer_steps_per_grpo_step(SimpleNamespace(policy=policy, samples_per_step=64))


@pytest.mark.skipif(
    importlib.util.find_spec("trl") is None,
    reason="trl is not installed (dependency group trl: uv pip install --no-deps trl==1.16.0)",
)
def test_trl_accepts_the_settings(tmp_path: object) -> None:
    from trl import GRPOConfig  # pyrefly: ignore[missing-import]  # optional group

    cfg = GRPOConfig(output_dir=str(tmp_path), **bench_trl.trl_settings(_config(), 2))
    assert cfg.generation_batch_size == 64
    assert cfg.steps_per_generation is not None
    # not a multiple: TRL computes the old logprobs (one pass per GRPO step, as ours)
    assert cfg.gradient_accumulation_steps % (cfg.steps_per_generation * cfg.num_iterations)


def test_accuracy_by_operation_reads_each_grades_samples(tmp_path: Path) -> None:
    rows = [
        {"step": 0, "question": "What is 7 * 8?", "score": 0.0},
        {"step": 0, "question": "What is 7 + 8?", "score": 1.0},
        {"step": 1, "question": "What is 7 * 8?", "score": 1.0},
        {"step": 1, "question": "What is 9 * 2?", "score": 0.0},
        {"step": 1, "question": "What is 9 - 2?", "score": 1.0},
    ]
    samples = tmp_path / "validation_samples.jsonl"
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert bench_trl.accuracy_by_operation(samples) == [
        {"*": 0.0, "+": 1.0},
        {"*": 0.5, "-": 1.0},
    ]
