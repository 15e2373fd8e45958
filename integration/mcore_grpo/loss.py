"""GRPO clipped policy-gradient loss as un-normalised sums plus the count that normalises them.

The split train step needs the two apart: microbatches return sums, and the step divides once
by the GLOBAL count (all DP ranks, all microbatches) of valid tokens (token level) or valid
sequences (sequence level).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from mcore_grpo.config import LossConfig

Batch = Mapping[str, torch.Tensor]


def loss_mask(batch: Batch) -> torch.Tensor:
    """[B, S-1] float: which next-token predictions are trained (token_mask x sample_mask)."""
    token_mask = batch["token_mask"][:, 1:].float()
    return token_mask * batch["sample_mask"].float()[:, None]


def per_token_loss(logprobs: torch.Tensor, batch: Batch, config: LossConfig) -> torch.Tensor:
    """[B, S-1]: -min(r*A, clip(r)*A), r = exp(logp - logp_old); r = 1 (with grad) on-policy.

    `logprobs` is [B, S-1] (next-token, as the train step computes them); the optional
    `batch["prev_logprobs"]` is [B, S] aligned with input_ids, position 0 unused -- the
    layout `get_logprobs` returns, so its output can be put in the batch as it is.
    """
    rows, seq = batch["input_ids"].shape
    if tuple(logprobs.shape) != (rows, seq - 1):
        raise ValueError(
            f"per_token_loss: logprobs {tuple(logprobs.shape)} must be [B, S-1] = "
            f"{(rows, seq - 1)} (next-token logprobs of input_ids {(rows, seq)})"
        )
    prev = batch.get("prev_logprobs")
    if prev is None:
        old = logprobs.detach()
    elif tuple(prev.shape) == (rows, seq):
        old = prev[:, 1:]
    else:
        raise ValueError(
            f"per_token_loss: batch['prev_logprobs'] {tuple(prev.shape)} must be [B, S] = "
            f"{(rows, seq)}, aligned with input_ids like get_logprobs() returns it "
            "(position 0 unused)"
        )
    ratio = torch.exp(logprobs - old)
    adv = batch["advantages"].float()[:, None]
    clipped = torch.clamp(ratio, 1.0 - config.ratio_clip, 1.0 + config.ratio_clip)
    return -torch.minimum(ratio * adv, clipped * adv)


def loss_sum(logprobs: torch.Tensor, batch: Batch, config: LossConfig) -> torch.Tensor:
    """Scalar sum whose gradient, divided by `valid_count` summed globally, is the loss's."""
    mask = loss_mask(batch)
    per_tok = per_token_loss(logprobs, batch, config) * mask
    if config.level == "token":
        return per_tok.sum()
    seq_tokens = mask.sum(dim=1).clamp(min=1.0)
    return (per_tok.sum(dim=1) / seq_tokens).sum()


def valid_count(batch: Batch, config: LossConfig) -> torch.Tensor:
    """Local number of valid tokens (token level) or sequences (sequence level), float64."""
    if config.level == "token":
        return loss_mask(batch).sum().to(torch.float64)
    return batch["sample_mask"].float().sum().to(torch.float64)
