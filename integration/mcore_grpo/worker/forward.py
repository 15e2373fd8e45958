"""One forward pass of the policy: masks, positions, full-vocab logits, real-vocab logprobs."""

from __future__ import annotations

from typing import Any

import torch


def attention_inputs(valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Position ids and the megatron attention mask for (possibly left-) padded rows.

    `valid` is [B, S] (1 = real token). The mask is [B, 1, S, S] bool, True = masked: causal
    plus key padding. megatron-core's local attention uses a given mask as-is (no implicit
    causal mask when one is passed), so both parts are needed. Positions count real tokens
    only, so a left-padded prompt sees the same positions as the unpadded one.
    """
    valid = valid.bool()
    seq = valid.shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=valid.device).triu(1)
    mask = causal[None, None, :, :] | ~valid[:, None, None, :]
    positions = (valid.long().cumsum(dim=1) - 1).clamp(min=0)
    return positions, mask


def policy_logits(
    model: torch.nn.Module, input_ids: torch.Tensor, valid: torch.Tensor
) -> torch.Tensor:
    """[B, S, V] fp32 logits over the full (padded) vocab, gathered across TP ranks."""
    positions, mask = attention_inputs(valid)
    return model_logits(model, input_ids, positions, mask)


def model_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    mask: torch.Tensor,
    inference_context: Any = None,
) -> torch.Tensor:
    """[B, S', V] fp32 logits for explicit positions and mask, gathered across TP ranks.

    `inference_context`: megatron-core's KV-cache context (the cached sampler); then S' may be
    1 (only the last position's logits are materialised) and the output layer gathers the TP
    shards itself (megatron-core's inference mode requires `runtime_gather_output`)."""
    from megatron.core import parallel_state, tensor_parallel

    if inference_context is not None:
        logits = model(
            input_ids,
            positions,
            mask,
            inference_context=inference_context,
            runtime_gather_output=True,
        )
        return logits.float()
    logits = model(input_ids, positions, mask)
    if parallel_state.get_tensor_model_parallel_world_size() > 1:
        logits = tensor_parallel.gather_from_tensor_model_parallel_region(logits)
    return logits.float()


def real_vocab_logits(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """`logits` with the padded-vocab ids (>= `vocab_size`) at -inf, out of place.

    The model's vocab is padded (TP divisibility); those ids are no tokenizer tokens. The
    sampler, the logprob forward and the training forward all normalise over the real ids
    only, so the trained distribution is the sampled one and the padded logits get no
    gradient.
    """
    if vocab_size >= logits.shape[-1]:
        return logits
    padded = torch.arange(logits.shape[-1], device=logits.device) >= vocab_size
    return logits.masked_fill(padded, float("-inf"))


def next_token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, vocab_size: int, temperature: float = 1.0
) -> torch.Tensor:
    """[B, S-1]: log p(input_ids[:, t+1] | prefix up to t), over the `vocab_size` real ids,
    at `temperature` (the sampler's, so the scored distribution is the sampled one).

    Raises ValueError for an input id at or beyond `vocab_size` (a padded-vocab id is never
    a token; its logprob would be -inf).
    """
    targets = input_ids[:, 1:]
    if targets.numel() and int(targets.max()) >= vocab_size:
        raise ValueError(
            f"next_token_logprobs: input id {int(targets.max())} >= tokenizer vocab size "
            f"{vocab_size} (ids beyond it are model padding); check the batch's input_ids "
            "and WorkerConfig.model.vocab_size."
        )
    scaled = logits[:, :-1, :] if temperature == 1.0 else logits[:, :-1, :] / temperature
    logp = torch.log_softmax(real_vocab_logits(scaled, vocab_size), dim=-1)
    return logp.gather(-1, targets[:, :, None]).squeeze(-1)
