"""Batch layouts between NeMo-RL and the worker (pure torch; no NeMo-RL import).

NeMo-RL pads right: ``input_ids`` [B, S] with ``input_lengths`` [B]; per-token tensors are
[B, S] aligned with ``input_ids`` (logprobs with 0 at position 0), exactly the worker's
layout (`mcore_grpo.worker.batch`), so training and logprob batches only gain an
``attention_mask``. The worker's sampler takes LEFT-padded prompts and returns the prompt
columns then the sampled columns; NeMo-RL's `GenerationOutputSpec` is right-padded again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def length_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """[B, width] long: 1 for the first `lengths[i]` columns of row i."""
    return (torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]).long()


def worker_batch(data: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The tensors of a NeMo-RL batch with B rows, plus the ``attention_mask`` of its lengths."""
    input_ids = data["input_ids"]
    rows = input_ids.shape[0]
    batch = {
        k: v
        for k, v in data.items()
        if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == rows
    }
    batch["attention_mask"] = length_mask(data["input_lengths"], input_ids.shape[1])
    return batch


def left_pad(
    input_ids: torch.Tensor, input_lengths: torch.Tensor, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded prompts -> (left-padded ids, mask), both [B, max(lengths)]."""
    width = int(input_lengths.max())
    ids = torch.full((input_ids.shape[0], width), pad_id, dtype=input_ids.dtype)
    mask = torch.zeros((input_ids.shape[0], width), dtype=torch.long)
    for row, length in enumerate(input_lengths.tolist()):
        ids[row, width - length :] = input_ids[row, :length]
        mask[row, width - length :] = 1
    return ids, mask


def generation_output(
    input_ids: torch.Tensor,
    input_lengths: torch.Tensor,
    output_ids: torch.Tensor,
    output_logprobs: torch.Tensor,
    generation_lengths: torch.Tensor,
    *,
    prompt_width: int,
    max_new_tokens: int,
    stop_token_ids: tuple[int, ...],
    pad_id: int,
) -> dict[str, torch.Tensor]:
    """The worker's left-padded sampler output -> NeMo-RL's right-padded `GenerationOutputSpec`.

    `output_ids`/`output_logprobs` are [B, prompt_width + T] with the sampled tokens from
    column `prompt_width` on; row i of the result is its prompt (``input_lengths[i]`` tokens),
    then its ``generation_lengths[i]`` sampled tokens, then padding (logprobs 0 outside the
    sampled tokens). ``truncated``: the response used the whole budget without a stop token.
    """
    rows = input_ids.shape[0]
    width = int(input_lengths.max()) + max_new_tokens
    ids = torch.full((rows, width), pad_id, dtype=torch.long)
    logprobs = torch.zeros((rows, width), dtype=torch.float32)
    truncated = torch.zeros(rows, dtype=torch.bool)
    stops = torch.tensor(stop_token_ids, dtype=torch.long)
    for row in range(rows):
        plen, glen = int(input_lengths[row]), int(generation_lengths[row])
        sampled = output_ids[row, prompt_width : prompt_width + glen].cpu()
        ids[row, :plen] = input_ids[row, :plen]
        ids[row, plen : plen + glen] = sampled
        logprobs[row, plen : plen + glen] = output_logprobs[
            row, prompt_width : prompt_width + glen
        ].cpu()
        truncated[row] = glen >= max_new_tokens and not bool(torch.isin(sampled, stops).any())
    return {
        "output_ids": ids,
        "logprobs": logprobs,
        "generation_lengths": generation_lengths.cpu().long(),
        "unpadded_sequence_lengths": input_lengths.cpu().long() + generation_lengths.cpu().long(),
        "truncated": truncated,
    }
