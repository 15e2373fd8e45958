"""The training batch the worker consumes: its layout, which positions are trained, the count.

A batch maps names to tensors with B rows. Per-token tensors are [B, S], aligned with
``input_ids`` (``attention_mask``, ``token_mask``, ``prev_logprobs``, ...); per-sample tensors
are [B] (``sample_mask``, ``advantages``). The model predicts token t+1 at position t, so the
trained positions are [B, S-1]: `loss_mask` says which, and `valid_count` is the number a
loss sum is divided by -- valid tokens (token level) or valid sequences (sequence level).
This is the ONE definition of both: the GRPO loss (`mcore_grpo.grpo.algorithm.loss`) and the split
train step (`mcore_grpo.worker.train_step`) read them from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from mcore_grpo.config.loss import LossLevel

Batch = Mapping[str, torch.Tensor]

# The loss a train step differentiates, supplied by the caller (worker constructor or
# `MegatronPolicyWorker.loss_sum_fn`): called once per microbatch with
#   logprobs: [B, S-1] next-token logprobs of input_ids[:, 1:], with grad (real vocab only);
#   microbatch: the batch rows of this microbatch, per-token tensors [B, S] aligned with
#     input_ids (as `get_logprobs` returns them), per-sample tensors [B];
# and returns a scalar, UN-normalised SUM over the units `valid_count` counts for
# `WorkerConfig.loss.level` (valid tokens, or valid sequences). The step divides the summed
# gradients once by the global count, so a loss normalised per microbatch would be wrong.
# The GRPO loss (`mcore_grpo.grpo.algorithm.loss.loss_sum_fn`) is one.
LossSumFn = Callable[[torch.Tensor, Batch], torch.Tensor]


def loss_mask(batch: Batch) -> torch.Tensor:
    """[B, S-1] float: which next-token predictions are trained (token_mask x sample_mask)."""
    token_mask = batch["token_mask"][:, 1:].float()
    return token_mask * batch["sample_mask"].float()[:, None]


def valid_count(batch: Batch, level: LossLevel) -> torch.Tensor:
    """Local number of valid tokens (token level) or sequences (sequence level), float64."""
    if level == "token":
        return loss_mask(batch).sum().to(torch.float64)
    return batch["sample_mask"].float().sum().to(torch.float64)


def split_microbatches(batch: Batch, size: int) -> list[dict[str, torch.Tensor]]:
    """Consecutive row slices of every tensor in `batch`."""
    rows = next(iter(batch.values())).shape[0]
    return [{k: v[i : i + size] for k, v in batch.items()} for i in range(0, rows, size)]


def batch_to(batch: Batch, device: torch.device) -> dict[str, torch.Tensor]:
    """`batch` with every tensor on `device` (no copy for those already there).

    The worker's entry points call it, so a caller holding host tensors still runs on a GPU
    worker; the GRPO loop builds its batches on the worker's device and pays nothing."""
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}
