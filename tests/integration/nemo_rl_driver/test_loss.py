"""The NeMo-RL loss adapter: called at global counts 1, metrics rescaled per declared normaliser.

A stand-in loss with NeMo-RL's calling convention and attributes (the real `ClippedPGLossFn`
runs in test_nemo_rl_pieces.py); expectations are worked by hand.
"""

from __future__ import annotations

import enum
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch
from mcore_grpo.nemo_rl_driver.loss import NemoRLLossSum, loss_level, normaliser


class Kind(enum.Enum):  # stands for NeMo-RL's MetricNormalizer / LossType values
    TOKENS = "tokens"
    SEQUENCES = "sequences"
    NONE = "none"
    TOKEN_LEVEL = "token_level"
    SEQUENCE_LEVEL = "sequence_level"


class SumLoss:
    """loss = sum(logprobs * mask) / global_valid_toks, NeMo-RL style."""

    loss_type = Kind.TOKEN_LEVEL
    metric_normalizations: ClassVar[dict[str, Kind]] = {
        "loss": Kind.TOKENS,
        "per_seq": Kind.SEQUENCES,
        "count": Kind.NONE,
    }

    def __init__(self) -> None:
        self.counts: list[tuple[float, float]] = []

    def __call__(
        self, logprobs: torch.Tensor, data: Any, seqs: torch.Tensor, toks: torch.Tensor
    ) -> tuple[torch.Tensor, dict]:
        self.counts.append((float(seqs), float(toks)))
        mask = data["token_mask"][:, 1:]
        loss = (logprobs * mask).sum() / toks
        return loss, {
            "loss": float(loss),
            "per_seq": 6.0,
            "count": 2.0,
            "ratio_max": 9.0,
            "other": 4.0,
        }


def test_the_loss_is_called_with_counts_one_and_returns_the_raw_sum() -> None:
    fn = SumLoss()
    adapter = NemoRLLossSum(fn)
    logprobs = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    out = adapter(logprobs, {"token_mask": torch.tensor([[0, 1, 1], [0, 1, 0]])})
    assert fn.counts == [(1.0, 1.0)]
    assert float(out) == 1.0 + 2.0 + 3.0


def test_take_rescales_each_metric_by_its_global_count_and_the_step_count() -> None:
    adapter = NemoRLLossSum(SumLoss())
    adapter.raw_metrics = [
        {"loss": 12.0, "per_seq": 6.0, "count": 2.0, "ratio_max": 9.0, "other": 4.0}
    ]
    (row,) = adapter.take(
        global_valid_toks=4.0, global_valid_seqs=3.0, num_global_batches=2, extra={"lr": 0.1}
    )
    assert row == {
        "loss": 12.0 / 4 / 2,
        "per_seq": 6.0 / 3 / 2,
        "count": 2.0 / 2,
        "ratio_max": 9.0,  # extrema are never scaled
        "other": 4.0 / 4 / 2,  # undeclared: the gradient's (token) count
        "lr": 0.1,
        "global_valid_toks": 4.0,
        "global_valid_seqs": 3.0,
    }
    assert adapter.raw_metrics == []


def test_loss_level_and_normaliser_follow_the_loss_type() -> None:
    seq = SimpleNamespace(loss_type=Kind.SEQUENCE_LEVEL, metric_normalizations={})
    assert loss_level(SumLoss()) == "token"
    assert loss_level(seq) == "sequence"
    assert normaliser(seq, "anything") == "sequences"
    assert normaliser(seq, "probs_ratio_min") == "none"
    with pytest.raises(ValueError, match="TOKEN_LEVEL and SEQUENCE_LEVEL"):
        loss_level(SimpleNamespace(loss_type=None))
