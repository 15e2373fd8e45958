"""One prefill per distinct prompt: a GRPO group's samples share their prompt's KV cache (and,
in models with recurrent layers, their prompt's convolution and recurrent states).

A GRPO batch holds each prompt `num_generations` times. The prefill is a full forward over
every prompt token, so on a 2-core CPU it is about half of a generate call (SmolLM2-135M's
shapes, 64 rows of 128 prompt tokens: 25 s of 59 s); the keys and values it writes depend
only on the row's own tokens, mask and positions, so identical rows write identical caches.
This module finds the distinct prompts (token ids at real positions and the padding mask
both equal), the sampler prefills only those, and `expand_cache` copies each one's cached
keys and values into the batch rows that share it. Decoding then runs over the full batch,
each row with its own draws, exactly as before.

What is exact: the cached keys and values are the same computation on the same inputs; the
only difference is the batch size of the prefill's matmuls, which on some BLAS kernels
changes the reduction order (differences at float rounding, 1e-7 in fp32).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch


class KVCacheContext(Protocol):
    """What `expand_cache` reads of megatron-core's `StaticInferenceContext`."""

    key_value_memory_dict: dict[Any, Any]


@dataclass(frozen=True)
class PromptGroups:
    """Which rows of a batch repeat which prompt.

    `first[u]`: the batch row that holds distinct prompt u (its first occurrence);
    `inverse[b]`: the distinct prompt of row b. Rows b with equal `inverse[b]` share a cache.
    """

    first: torch.Tensor  # [U] long
    inverse: torch.Tensor  # [B] long

    @property
    def shared(self) -> bool:
        """True when some prompt repeats, i.e. sharing the prefill saves work."""
        return self.first.numel() < self.inverse.numel()


def distinct_prompts(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> PromptGroups:
    """Group the rows of a [B, P] prompt batch by content: same mask, same ids where real.

    Pad columns may hold any id; they never count."""
    if prompt_ids.shape != prompt_mask.shape or prompt_ids.dim() != 2:
        raise ValueError(
            f"prompt ids {tuple(prompt_ids.shape)} and mask {tuple(prompt_mask.shape)} must "
            "both be [batch, prompt_len]"
        )
    key = torch.where(prompt_mask.bool(), prompt_ids, torch.full_like(prompt_ids, -1))
    _, inverse = torch.unique(key, dim=0, return_inverse=True)
    rows = torch.arange(inverse.numel(), device=inverse.device)
    count = int(inverse.max()) + 1 if inverse.numel() else 0
    first = torch.full((count,), inverse.numel(), dtype=torch.long, device=inverse.device)
    first = first.scatter_reduce(0, inverse, rows, reduce="amin")
    return PromptGroups(first=first, inverse=inverse)


def expand_cache(context: KVCacheContext, groups: PromptGroups, length: int) -> None:
    """Copy the first `length` cached positions of distinct prompt u (written at batch row u
    by a prefill over `groups.first`) into every batch row whose prompt is u.

    `context` is megatron-core's `StaticInferenceContext`: `key_value_memory_dict` maps each
    attention layer to its ([max_seq, max_batch, ...] key, value) buffers. Anything else in it
    (a recurrent layer's state, a multimodal token count) is not a KV cache this can expand:
    that is a caller's error, raised naming the entry."""
    _expand_buffers(context.key_value_memory_dict, groups, length)


def _expand_buffers(entries: dict[Any, Any], groups: PromptGroups, length: int) -> None:
    """`expand_cache` over the given entries of a context (each a tuple of KV buffers)."""
    batch = groups.inverse.numel()
    for layer, buffers in entries.items():
        if not isinstance(buffers, tuple) or not all(
            isinstance(b, torch.Tensor) and b.dim() >= 2 and b.shape[1] >= batch for b in buffers
        ):
            raise ValueError(
                f"inference context entry {layer!r} is not a [seq, batch, ...] key/value cache "
                f"of at least {batch} rows; a shared prefill can only expand attention KV caches "
                "(a model with recurrent layers: expand_states)"
            )
        for buffer in buffers:
            buffer[:length, :batch] = buffer[:length, groups.inverse]


def experts_exchange_tokens() -> bool:
    """Whether MoE layers exchange tokens with ranks that hold other prompts (expert
    parallelism): megatron-core's token dispatchers gather every EP rank's tokens in collectives
    of equal sizes, so every rank must prefill as many rows as the others, its whole batch,
    not its distinct prompts (their number differs between ranks when a prompt repeats)."""
    from megatron.core import parallel_state

    return parallel_state.get_expert_model_parallel_world_size() > 1


def expand_states(
    context: KVCacheContext, groups: PromptGroups, length: int, model: torch.nn.Module
) -> None:
    """`expand_cache` for a model with recurrent layers (Mamba-2, gated delta net), after a
    prefill over `groups.first`: each recurrent layer's entry of the context, its per-row
    (conv state, recurrent state) of the U prefilled rows, becomes the B rows' (row b gets its
    prompt's), and every other entry is a KV cache expanded as `expand_cache` does.

    A recurrent layer's entry is found by its module's `layer_number`, or Falcon-H1's
    ("mamba", n) where the layer also has attention (its static cache namespaces the mixer's
    entry). megatron-core's Mamba mixer reallocates zero states when the batch differs from the
    one it cached (`cached_batch_size`): the expansion sets it to the batch the decode steps
    run."""
    from mcore_grpo.worker.layer_types import recurrent_layer_types

    entries = context.key_value_memory_dict
    kinds = recurrent_layer_types()
    recurrent = {}
    for module in model.modules():
        if isinstance(module, kinds):
            number = module.layer_number
            recurrent[("mamba", number) if ("mamba", number) in entries else number] = module
    missing = [key for key in recurrent if key not in entries]
    if missing:
        raise ValueError(
            f"recurrent layers {missing} wrote no state in the inference context: the prefill "
            "did not run through them, so there is nothing to share"
        )
    batch = groups.inverse.numel()
    for key, module in recurrent.items():
        entries[key] = tuple(state[groups.inverse] for state in entries[key])
        if hasattr(module, "cached_batch_size"):
            module.cached_batch_size = batch
    _expand_buffers({k: v for k, v in entries.items() if k not in recurrent}, groups, length)
