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
    """[B, S-1]: -min(r*A, clip(r)*A), r = exp(logp - logp_old); r = 1 (with grad) on-policy."""
    old = batch.get("prev_logprobs")
    old = logprobs.detach() if old is None else old
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
