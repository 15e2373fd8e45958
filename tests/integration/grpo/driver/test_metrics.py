"""Training metrics: NeMo-RL's names, meanings and aggregation, on hand-made results."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
import torch
from mcore_grpo.config.loss import ClippedPGLossConfig
from mcore_grpo.grpo.algorithm.loss import RecordingLossSum, clipped_pg_loss
from mcore_grpo.grpo.driver.metrics import rollout_metrics, train_metrics
from mcore_grpo.grpo.driver.metrics_plot import EXPLAINING, plot_metrics
from mcore_grpo.grpo.ranks.messages import TrainResult
from mcore_grpo.grpo.ranks.train_batch import logprob_sums


def _result(**kw: Any) -> TrainResult:
    return TrainResult(logprob_time_s=0.0, training_time_s=0.0, **kw)


def test_train_metrics_sum_over_optimizer_steps_and_replicas() -> None:
    # 2 replicas x 2 optimizer steps. By hand:
    #   loss = 0.5 + 0.25 (replica 0 holds the DP-reduced loss of each step)
    #   kl_penalty = (0.1 + 0.2) + (0.3 + 0.4)  (each share already / its step's count)
    #   token_mult_prob_error = (3 + 5) / (3 + 5) + (4.4 + 2.2) / (4 + 2) = 1 + 1.1
    #   kl = (0.3 + 0.5 + 0.4 + 0.2) / (3 + 5 + 4 + 2) = 0.1 (our own: before the update)
    #   grad_norm = the last optimizer step's = 7.0
    r0 = _result(
        kl_sum=[0.3, 0.4],
        prob_error_sum=[3.0, 4.4],
        tokens=[3.0, 4.0],
        kl_penalty=[0.1, 0.3],
        loss=[0.5, 0.25],
        grad_norm=[9.0, 7.0],
    )
    r1 = _result(
        kl_sum=[0.5, 0.2],
        prob_error_sum=[5.0, 2.2],
        tokens=[5.0, 2.0],
        kl_penalty=[0.2, 0.4],
        loss=[0.5, 0.25],
        grad_norm=[9.0, 7.0],
    )
    m = train_metrics([r0, r1])
    assert m["loss"] == pytest.approx(0.75)
    assert m["kl_penalty"] == pytest.approx(1.0)
    assert m["token_mult_prob_error"] == pytest.approx(2.1)
    assert m["kl"] == pytest.approx(0.1)
    assert m["grad_norm"] == 7.0
    assert m["optimizer_steps"] == 2.0


def test_recorded_kl_penalty_is_unscaled_and_normalised_like_the_gradient() -> None:
    # One sequence-level microbatch: sequence means of k3 at logr = log 2 (both tokens of
    # row 0) and logr = 0 (row 1): (1 - log 2 + 0) / 2 valid sequences, not times beta.
    rows, seq = 2, 3
    batch = {
        "input_ids": torch.zeros(rows, seq, dtype=torch.long),
        "token_mask": torch.tensor([[0, 1, 1], [0, 1, 0]]),
        "sample_mask": torch.ones(rows),
        "advantages": torch.zeros(rows),
        "prev_logprobs": torch.zeros(rows, seq),
        "reference_policy_logprobs": torch.tensor(
            [[0.0, 0.6931471805599453, 0.6931471805599453], [0.0, 0.0, 0.0]]
        ),
    }
    cfg = ClippedPGLossConfig(reference_policy_kl_penalty=0.5, token_level_loss=False)
    recorder = RecordingLossSum(cfg)
    recorder(torch.zeros(rows, seq - 1), batch)
    raw = recorder.take()
    assert raw["kl_penalty"] / 2 == pytest.approx((1 - 0.6931471805599453) / 2, rel=1e-6)
    assert recorder.take() == {}
    # ... and the same value the loss reports with the global counts.
    _, metrics = clipped_pg_loss(
        torch.zeros(rows, seq - 1),
        torch.zeros(rows, seq - 1),
        batch["reference_policy_logprobs"][:, 1:],
        torch.zeros(rows),
        batch["token_mask"][:, 1:],
        cfg,
        global_valid_toks=3,
        global_valid_seqs=2,
    )
    assert float(metrics["kl_penalty"]) == pytest.approx(raw["kl_penalty"] / 2, rel=1e-6)


def test_logprob_sums_kl_direction_hand_checked() -> None:
    # KL(policy || reference) with k3 and logr = logp_ref - logp_policy (Schulman): policy
    # logprob 0, reference log 2 on the one trained token -> k3 = 2 - 1 - log 2 = 0.3069.
    # The other direction (logr = -log 2) would give 1/2 - 1 + log 2 = 0.1931; k1 would flip
    # its sign. generation == policy: token_mult_prob_error sum = exp(0) = 1 per token.
    log2 = 0.6931471805599453
    batch = {
        "token_mask": torch.tensor([[0, 0, 1]]),
        "sample_mask": torch.ones(1),
        "prev_logprobs": torch.zeros(1, 3),
        "reference_policy_logprobs": torch.tensor([[0.0, 0.0, log2]]),
        "generation_logprobs": torch.zeros(1, 3),
    }
    sums = logprob_sums(batch, ClippedPGLossConfig(reference_policy_kl_type="k3"))
    assert sums.tokens == 1.0
    assert sums.kl_sum == pytest.approx(1 - log2, rel=1e-6)
    assert sums.prob_error_sum == pytest.approx(1.0)
    k1 = logprob_sums(batch, ClippedPGLossConfig(reference_policy_kl_type="k1"))
    assert k1.kl_sum == pytest.approx(-log2, rel=1e-6)


def test_token_metrics_follow_nemo_rl_per_optimizer_step_and_clip_fraction_is_a_share() -> None:
    # 2 replicas x 2 optimizer steps, raw sums over each replica's tokens (3+5, then 4+2).
    #   approx_entropy = (1.2 + 2.8) / 8 + (2.0 + 1.0) / 6 = 0.5 + 0.5 (NeMo-RL: summed)
    #   clip_fraction  = (1 + 1 + 2 + 0) / (8 + 6) = 4 / 14 (ours: share of all tokens)
    def result(tokens: list[float], sums: list[dict[str, float]]) -> TrainResult:
        zeros = [0.0] * len(tokens)
        return _result(
            kl_sum=zeros,
            prob_error_sum=tokens,
            tokens=tokens,
            kl_penalty=zeros,
            loss=zeros,
            grad_norm=zeros,
            token_metric_sums=sums,
        )

    r0 = result(
        [3.0, 4.0],
        [
            {"approx_entropy": 1.2, "clip_fraction": 1.0},
            {"approx_entropy": 2.0, "clip_fraction": 2.0},
        ],
    )
    r1 = result(
        [5.0, 2.0],
        [
            {"approx_entropy": 2.8, "clip_fraction": 1.0},
            {"approx_entropy": 1.0, "clip_fraction": 0.0},
        ],
    )
    m = train_metrics([r0, r1])
    assert m["approx_entropy"] == pytest.approx(1.0)
    assert m["clip_fraction"] == pytest.approx(4 / 14)


def test_rollout_metrics_by_hand() -> None:
    # Groups of 3: (1, 1, 1) teaches nothing, (0, 1, 0) and (0.5, 0.5, 0.25) do, (0, 0, 0)
    # does not: 2 of 4 groups. Lengths 12 responses, 1..12 tokens: mean 6.5.
    rewards = [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.5, 0.5, 0.25, 0.0, 0.0, 0.0]
    m = rollout_metrics(rewards, 3, list(range(1, 13)))
    assert m["frac_groups_with_reward_signal"] == 0.5
    assert m["mean_gen_tokens_per_sample"] == 6.5
    # A constant group whose std rounds away from 0 in float arithmetic is still constant.
    assert rollout_metrics([0.1] * 3, 3, [1] * 3)["frac_groups_with_reward_signal"] == 0.0


def test_plot_has_the_panels_that_explain_a_run(tmp_path: Path) -> None:
    """Records with the explaining metrics get two more panels (policy drift, sizes); older
    records without them still plot. The PNG's height (its IHDR header) counts the panels."""
    base = {"reward_mean": 0.5, "loss": 0.1, "kl": 0.0, "optimizer_steps": 2.0}
    explaining = dict.fromkeys(EXPLAINING, 1.0)
    heights = []
    for name, extra in (("plain", {}), ("explained", explaining)):
        records = [base | extra | {"step": s} for s in (1, 2, 3)]
        png = plot_metrics(records, tmp_path / f"{name}.png", name)
        heights.append(struct.unpack(">II", png.read_bytes()[16:24])[1])
    assert heights[1] / heights[0] == pytest.approx((4 * 2.9 + 0.3) / (2 * 2.9 + 0.3), rel=0.02)
