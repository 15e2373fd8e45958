"""The CPU preset shortened, end to end in this process: metrics, plot, checkpoint, resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcore_grpo.config.loader import load_config
from mcore_grpo.grpo.driver.checkpoint import CheckpointError, find_latest
from mcore_grpo.grpo.driver.loop import GRPOLoop, ReplicaLayout
from mcore_grpo.grpo.driver.metrics import REQUIRED_KEYS
from mcore_grpo.grpo.ranks.messages import TaskTokens
from mcore_grpo.grpo.ranks.runner import LocalRunner, WorkerFailed
from mcore_grpo.grpo.tasks.task import build_task
from mcore_grpo.worker.policy_worker import MegatronPolicyWorker

CPU_PRESET = "runs the cpu-tiny preset (policy.device=cpu), which CUDA machines refuse"


def _run(
    out: Path, overrides: list[str], *, resume: bool = False, fail_at_step: int | None = None
) -> Any:
    config = load_config(overrides=overrides)
    task = build_task(config.task.name, config.task.max_addend)
    tokens = TaskTokens(task.vocab_size, task.pad_id, task.eos_id)
    runner = LocalRunner(config, tokens, fail_at_step=fail_at_step)
    try:
        return GRPOLoop(config, task, runner, out).run(resume=resume, progress=False)
    finally:
        runner.shutdown()


class _NoRunner:
    """Stands in for the workers where the code under test must fail before calling them."""

    world_size = 1

    def __init__(self) -> None:
        self.places: list[Any] = []

    def call(self, method: str, per_rank_args: Any) -> list[Any]:
        raise AssertionError(f"{method} reached the workers")

    def shutdown(self) -> None:
        """Nothing to stop."""


@pytest.mark.cpu_only(reason=CPU_PRESET)
def test_cpu_preset_short_end_to_end_and_resume(tmp_path: Path, short: list[str]) -> None:
    out = tmp_path / "run"
    result = _run(out, short)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    for record in records:
        assert set(REQUIRED_KEYS) <= set(record)
        assert 0.0 <= record["reward_mean"] <= 1.0
    assert records[0]["kl"] == 0.0  # the policy is the reference before the first update
    assert records[-1]["kl"] > 0.0  # ... and has moved away from it after two steps
    # NeMo-RL's aggregation: summed over the step's optimizer steps (16 samples / 8 = 2),
    # each 1.0 when the training logprobs equal the sampler's.
    assert records[0]["optimizer_steps"] == 2
    assert records[0]["token_mult_prob_error"] == pytest.approx(2.0, abs=2e-4)
    # NeMo-RL's kl_penalty: the loss's unscaled KL with the CURRENT policy, summed over the
    # optimizer steps (so > 0 once the policy has moved).
    assert records[0]["kl_penalty"] >= 0.0
    assert records[-1]["kl_penalty"] > 0.0
    for r in records:  # the metrics that explain a run (their values: test_nemo_rl_parity)
        # Of 2 optimizer steps the first is on-policy (ratio 1, never clipped).
        assert r["approx_entropy"] > 0.0 and 0.0 <= r["clip_fraction"] < 0.5
        # The sampler is the trained model: its logprobs agree with the trainer's.
        assert r["gen_kl_error"] == pytest.approx(0.0, abs=1e-5)
        assert r["probs_ratio"] == pytest.approx(2.0, abs=0.2)  # ~1 per optimizer step
        assert r["mean_gen_tokens_per_sample"] == r["response_tokens_mean"]
        assert 0.0 <= r["frac_groups_with_reward_signal"] <= 1.0
    assert result.plot_path is not None and result.plot_path.stat().st_size > 10_000
    point = find_latest(out)
    assert point.step == 3 and point.path.name == "step_000003"
    assert not list((out / "checkpoints").glob("*.tmp-*"))

    # Resume: steps 4..5 continue from the checkpoint; steps 1..3 are kept.
    _run(out, [*short, "grpo.max_num_steps=5"], resume=True)
    resumed = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in resumed] == [1, 2, 3, 4, 5]
    assert resumed[:3] == records
    assert resumed[3]["kl"] > 0.0  # the reference came back from the checkpoint, not re-init
    assert find_latest(out).step == 5


@pytest.mark.cpu_only(reason=CPU_PRESET)
def test_resume_from_different_model_config_is_refused(tmp_path: Path, short: list[str]) -> None:
    out = tmp_path / "run"
    _run(out, [*short, "grpo.max_num_steps=1"])
    config = load_config(overrides=[*short, "policy.tiny_model.hidden_size=32"])
    task = build_task(config.task.name)
    loop = GRPOLoop(config, task, _NoRunner(), out)
    with pytest.raises(CheckpointError, match=r"policy.tiny_model: checkpoint .*'hidden_size': 64"):
        loop.resume()


@pytest.mark.cpu_only(reason=CPU_PRESET)
def test_resume_without_checkpoint_is_refused(tmp_path: Path, short: list[str]) -> None:
    config = load_config(overrides=short)
    loop = GRPOLoop(config, build_task("digit-add"), _NoRunner(), tmp_path)
    with pytest.raises(CheckpointError, match="no finished checkpoint"):
        loop.resume()


@pytest.mark.cpu_only(reason=CPU_PRESET)
def test_worker_error_ends_run_without_checkpoint(tmp_path: Path, short: list[str]) -> None:
    out = tmp_path / "run"
    with pytest.raises(WorkerFailed, match="injected failure in generate at step 2 on rank 0"):
        _run(out, short, fail_at_step=2)
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1]
    assert not (out / "checkpoints").exists()


def test_replica_layout_groups_ranks_contiguously() -> None:
    """TP=2 over 4 ranks: ranks 0,1 are replica 0 and 2,3 replica 1; rank 0 and 2 speak for them."""
    layout = ReplicaLayout(dp=2, world=4)
    assert [layout.replica_of(r) for r in range(4)] == [0, 0, 1, 1]
    assert [layout.first_rank(d) for d in range(2)] == [0, 2]
    assert layout.per_rank(["a", "b"]) == ["a", "a", "b", "b"]
    assert layout.per_replica(["r0", "r1", "r2", "r3"]) == ["r0", "r2"]
    assert ReplicaLayout(dp=2, world=2).per_rank(["a", "b"]) == ["a", "b"]


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.cpu_only(reason=CPU_PRESET)
def test_without_a_kl_term_the_reference_forward_is_skipped_unless_kl_is_asked_for(
    tmp_path: Path, short: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At reference_policy_kl_penalty 0 the reference forward is skipped as NeMo-RL's grpo
    skips it (the KL reads 0); grpo.skip_reference_policy_logprobs_calculation=false keeps it
    for the `kl` metric alone: 0 at step 1 (the policy is the reference), > 0 once the
    policy has moved, and training bit-identical to the run without it."""
    two = [*short, "grpo.max_num_steps=2", "loss_fn.reference_policy_kl_penalty=0"]
    _run(tmp_path / "measured", [*two, "grpo.skip_reference_policy_logprobs_calculation=false"])

    def refuse(*_args: Any) -> None:
        raise AssertionError("the reference forward ran although it was to be skipped")

    monkeypatch.setattr(MegatronPolicyWorker, "get_reference_policy_logprobs", refuse)
    _run(tmp_path / "skipped", two)
    measured, skipped = _records(tmp_path / "measured"), _records(tmp_path / "skipped")
    assert measured[0]["kl"] == 0.0 and measured[1]["kl"] > 1e-4
    assert all(r["kl"] == 0.0 for r in skipped)
    assert all(r["kl_penalty"] == 0.0 for r in measured + skipped)  # no KL term in the loss
    for a, b in zip(measured, skipped, strict=True):
        for key in ("reward_mean", "loss", "grad_norm", "approx_entropy", "clip_fraction"):
            assert a[key] == b[key], key


@pytest.mark.cpu_only(reason=CPU_PRESET)
def test_grad_norm_is_logged_before_clipping(tmp_path: Path, short: list[str]) -> None:
    """One optimizer step (the same samples, the same policy): the norm the optimizer
    clips, logged before it clips, so it reads the same at policy.max_grad_norm 1e-6 as
    unclipped; after clipping it would be <= 1e-6."""
    one = [*short, "grpo.max_num_steps=1", "policy.train_global_batch_size=16"]
    norms = []
    for clip in ("0.000001", "1000000.0"):
        _run(tmp_path / clip, [*one, f"policy.max_grad_norm={clip}"])
        (record,) = _records(tmp_path / clip)
        assert record["optimizer_steps"] == 1
        norms.append(record["grad_norm"])
    assert norms[0] == norms[1] > 1e-3


@pytest.mark.cpu_only(reason=CPU_PRESET)
def test_checkpoint_must_save_by_ends_the_run_early_as_a_last_step(
    tmp_path: Path, short: list[str]
) -> None:
    # A limit already passed: the run ends after its first step, as after grpo.max_num_steps
    # (held-out evaluation, checkpoint); --resume goes on to the configured last step.
    out = tmp_path / "run"
    limited = [*short, "grpo.max_num_steps=4", "checkpointing.checkpoint_must_save_by=00:00:00:00"]
    _run(out, limited)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1]
    assert find_latest(out).step == 1
    _run(out, [*short, "grpo.max_num_steps=4"], resume=True)
    assert find_latest(out).step == 4


def test_checkpoint_must_save_by_reads_as_nemo_rl_reads_it() -> None:
    from mcore_grpo.config.deadline import must_save_by_seconds
    from mcore_grpo.grpo.nemo_rl.source import require_nemo_rl

    require_nemo_rl()
    from nemo_rl.utils.timer import convert_to_seconds

    for text in ("00:03:45:00", "01:00:00:07", "00:00:08:00"):
        assert must_save_by_seconds(text) == convert_to_seconds(text)
    assert must_save_by_seconds(None) is None
    with pytest.raises(ValueError, match=r"checkpoint_must_save_by='3h'.*DD:HH:MM:SS"):
        must_save_by_seconds("3h")


@pytest.mark.cpu_only(reason=CPU_PRESET)
def test_shared_prefix_rows_leave_the_run_unchanged(tmp_path: Path, short: list[str]) -> None:
    """`policy.shared_prefix_training` on and off from the same seed: each group's prompt is
    forwarded once instead of once per sample, and the run is the same run. The logprobs of
    the two layouts differ by float rounding only (1e-7), so every sample, reward and count
    is identical and the losses and gradient norms agree to 1e-5."""
    runs = {}
    for setting in ("true", "false"):
        out = tmp_path / setting
        _run(out, [*short, f"policy.shared_prefix_training={setting}"])
        lines = (out / "metrics.jsonl").read_text().splitlines()
        runs[setting] = [json.loads(line) for line in lines]
    shared, whole = runs["true"], runs["false"]
    assert [r["step"] for r in shared] == [r["step"] for r in whole] == [1, 2, 3]
    for a, b in zip(shared, whole, strict=True):
        assert a["reward_mean"] == b["reward_mean"]
        assert a["mean_gen_tokens_per_sample"] == b["mean_gen_tokens_per_sample"]
        for key in ("loss", "grad_norm", "kl", "approx_entropy"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), (a["step"], key)


@pytest.mark.cpu_only(reason=CPU_PRESET)
def test_responses_that_do_not_stop_are_counted_shaped_and_filtered_as_configured(
    tmp_path: Path, short: list[str]
) -> None:
    """One step of 64 samples, the same samples three ways. The digit task's 2-token budget
    cuts off every response that has not sampled EOS by then: `truncation_rate` counts them.
    The task pays 1 only for ``answer <eos>`` (a stopped response) and 0.5 for a cut-off one
    that starts with the answer, so `truncated_correct_rate` is 0 and the stop-properly
    penalty at 0 takes the half rewards away; overlong filtering keeps the rewards and drops
    those samples from the loss, so the update differs."""
    one = [
        *short,
        "grpo.max_num_steps=1",
        "grpo.num_prompts_per_step=8",
        "grpo.num_generations_per_prompt=8",
        "policy.train_global_batch_size=32",
    ]
    _run(tmp_path / "plain", one)
    coef = "grpo.reward_shaping.stop_properly_penalty_coef=0"
    _run(tmp_path / "shaped", [*one, "grpo.reward_shaping.enabled=true", coef])
    _run(tmp_path / "filtered", [*one, "grpo.overlong_filtering=true"])
    (plain,), (shaped,), (filtered,) = (
        _records(tmp_path / d) for d in ("plain", "shaped", "filtered")
    )
    assert 0.0 < plain["truncation_rate"] < 1.0
    assert shaped["truncation_rate"] == filtered["truncation_rate"] == plain["truncation_rate"]
    assert plain["truncated_correct_rate"] == 0.0
    assert plain["accuracy"] == shaped["accuracy"]  # the verifier's own score, before shaping
    assert shaped["reward_mean"] < plain["reward_mean"]
    assert filtered["reward_mean"] == plain["reward_mean"]
    assert filtered["loss"] != plain["loss"]


@pytest.mark.cpu_only(reason=CPU_PRESET)
def test_the_learning_rate_follows_nemo_rls_schedule_one_tick_per_grpo_step(
    tmp_path: Path, short: list[str]
) -> None:
    """policy.megatron_cfg.scheduler: warm-up over 2 GRPO steps from 0, then cosine to
    min_lr at step 5 (lr_decay_iters unset: grpo.max_num_steps, NeMo-RL's train_iters).
    NeMo-RL ticks megatron-core's scheduler once per train() call (one GRPO step, whatever
    the optimizer steps) and logs the rate read before the tick, so step s trains at the
    rate after s - 1 ticks. Worked by hand from OptimizerParamScheduler.get_lr:
    warm-up: init + (max - init) * n / 2 for n = 0, 1, 2; then
    min + (max - min) * 0.5 * (cos(pi * (n - 2) / 3) + 1) for n = 3, 4.
    At rate 0 the first step leaves the policy where it was: step 2 still sees KL 0."""
    cfg = "policy.megatron_cfg"
    _run(
        tmp_path / "run",
        [
            *short,
            "grpo.max_num_steps=5",
            f"{cfg}.optimizer.lr=1e-3",
            f"{cfg}.optimizer.min_lr=1e-5",
            f"{cfg}.scheduler.lr_warmup_iters=2",
            f"{cfg}.scheduler.lr_warmup_init=0",
            f"{cfg}.scheduler.lr_decay_style=cosine",
        ],
    )
    records = _records(tmp_path / "run")
    expected = [0.0, 5e-4, 1e-3, 1e-5 + 0.75 * 9.9e-4, 1e-5 + 0.25 * 9.9e-4]
    assert [r["lr"] for r in records] == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert records[1]["kl"] == 0.0 and records[2]["kl"] > 0.0
    assert all(r["optimizer_steps"] == 2 for r in records)  # ticks are not optimizer steps


def test_a_warm_up_that_never_ends_is_refused_when_the_config_loads() -> None:
    overrides = ["grpo.max_num_steps=12", "policy.megatron_cfg.scheduler.lr_warmup_iters=13"]
    with pytest.raises(ValueError, match=r"lr_warmup_iters=13 must be below lr_decay_iters \(12"):
        load_config(overrides=overrides)
