"""Training metrics: NeMo-RL's names, meanings and aggregation, on hand-made results."""

from __future__ import annotations

import pytest
import torch
from mcore_grpo.grpo.algorithm.loss import ClippedPGLossConfig, RecordingLossSum, clipped_pg_loss
from mcore_grpo.grpo.driver.metrics import train_metrics
from mcore_grpo.grpo.ranks.messages import TrainResult
from mcore_grpo.grpo.ranks.train_batch import logprob_sums


def _result(**kw: list[float]) -> TrainResult:
    return TrainResult(logprob_time_s=0.0, training_time_s=0.0, **kw)  # type: ignore[arg-type]


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
