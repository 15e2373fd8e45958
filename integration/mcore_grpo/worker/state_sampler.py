"""Sampling through the recurrent state: megatron-core's `StaticInferenceContext` for models
with Mamba-2 (NemotronH, Falcon-H1) or gated delta net layers (Qwen3-Next, Qwen3.5), one token
per forward after a prefill.

Such a layer carries a conv state and a recurrent state per row instead of a KV cache, and takes
no padding mask: a left pad would enter the state (`forward.has_recurrent_layers`). So no row is
padded here. Each row's prompt is left-aligned, the prefill takes the first `m` tokens of every
row (`m` = the shortest prompt), and each decode step feeds every row one token at the same
position: its next prompt token while it has one, else the token sampled from its last logits.
All rows stay at the same length, so the attention layers of a hybrid model need no mask
either. A prompt longer than the shortest costs one decode step per extra token.

Rows with the same prompt (a GRPO group) are prefilled once (`share_prefill`): the prefill
runs over the distinct prompts, then each one's states and KV cache are copied to the rows that
repeat it (`shared_prefill.expand_states`), as the KV-cache sampler does with its cache.

The tokens, their logprobs and the output layout are the other samplers' (`Rollout`): each
row's generated tokens are collected, then written to a `Rollout` column by column. Greedy
tokens equal recompute's. A seeded sampler draws for every row at each step where some row
samples, so a row whose prompt is longer than the batch's shortest uses later draws of its
generator than recompute would (same distribution; rows of one GRPO group share a prompt, and so
their draws).
"""

from __future__ import annotations

from typing import Any

import torch

from mcore_grpo.worker.forward import leading_pads, model_logits, roll_rows
from mcore_grpo.worker.sampling import (
    GenerationOutput,
    Rollout,
    SamplingGenerator,
    SamplingParams,
    sample_next,
)
from mcore_grpo.worker.shared_prefill import (
    PromptGroups,
    distinct_prompts,
    expand_states,
    experts_exchange_tokens,
)


def _prompt_lengths(prompt_mask: torch.Tensor) -> torch.Tensor:
    """[B] real tokens per prompt; raises ValueError for a prompt without one."""
    lengths = prompt_mask.bool().sum(dim=1)
    if not bool(lengths.all()):
        empty = int((lengths == 0).nonzero()[0])
        raise ValueError(
            f"prompt row {empty} has no real token (prompt_mask is all 0): a recurrent state "
            "cannot start from nothing; drop the row or give it a token."
        )
    return lengths


def _repeated_prompts(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> PromptGroups | None:
    """The batch's prompt groups where some prompt repeats and the prefill may run over the
    distinct ones only (not under expert parallelism: `experts_exchange_tokens`), else None."""
    if experts_exchange_tokens():
        return None
    groups = distinct_prompts(prompt_ids, prompt_mask)
    return groups if groups.shared else None


def _prefill(
    model: torch.nn.Module,
    prompts: torch.Tensor,
    context: Any,
    shared: PromptGroups | None,
) -> torch.Tensor:
    """The logits after `prompts` ([B, m], every column real: causal attention needs no mask),
    writing the context's states and caches; with `shared`, forwarding only its distinct
    prompts and copying their states and caches to the rows that repeat them."""
    rows = prompts[shared.first] if shared is not None else prompts
    positions = torch.arange(rows.shape[1], device=rows.device).expand(rows.shape[0], -1)
    logits = model_logits(model, rows, positions, None, context)
    if shared is None:
        return logits
    expand_states(context, shared, rows.shape[1], model)
    return logits[shared.inverse]


@torch.no_grad()
def generate_through_state(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    params: SamplingParams,
    vocab_size: int,
    generator: SamplingGenerator = None,
    share_prefill: bool = True,
) -> GenerationOutput:
    """Sample up to `max_new_tokens` per row, decoding through the layers' recurrent state and
    KV cache; same semantics as `recompute_sampler.generate_recompute`. `share_prefill`: rows
    with the same prompt are prefilled once (False prefills every row: the reference in
    tests)."""
    from megatron.core.inference.contexts import StaticInferenceContext
    from megatron.core.inference.utils import InferenceMode

    batch, plen = prompt_ids.shape
    lengths = _prompt_lengths(prompt_mask)
    shortest = int(lengths.min())
    aligned = roll_rows(prompt_ids, leading_pads(prompt_mask))
    device = prompt_ids.device
    new_tokens = torch.full(
        (batch, params.max_new_tokens), params.pad_token_id, dtype=torch.long, device=device
    )
    new_logp = torch.zeros((batch, params.max_new_tokens), dtype=torch.float32, device=device)
    produced = torch.zeros(batch, dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    stops = torch.tensor(params.stop_token_ids, dtype=torch.long, device=device)
    rows = torch.arange(batch, device=device)
    context = StaticInferenceContext(batch, plen + params.max_new_tokens)
    shared = _repeated_prompts(prompt_ids, prompt_mask) if share_prefill else None
    with InferenceMode.active():
        logits = _prefill(model, aligned[:, :shortest], context, shared)
        context.increment_sequence_len_offset(shortest)
        context.enable_decode_mode()
        fed = shortest
        while True:
            past_prompt = fed >= lengths
            sampling = past_prompt & ~done
            next_input = aligned[:, min(fed, plen - 1)]
            if bool(sampling.any()):
                token, logp = sample_next(logits[:, -1, :], params, vocab_size, generator)
                at = produced.clamp(max=params.max_new_tokens - 1)
                new_tokens[rows[sampling], at[sampling]] = token[sampling]
                new_logp[rows[sampling], at[sampling]] = logp[sampling]
                produced += sampling.long()
                done |= sampling & (torch.isin(token, stops) | (produced >= params.max_new_tokens))
                next_input = torch.where(past_prompt, token, next_input)
            if bool(done.all()):
                break
            position = torch.full((batch, 1), fed, dtype=torch.long, device=device)
            logits = model_logits(model, next_input[:, None], position, None, context)
            context.increment_sequence_len_offset(1)
            fed += 1
    rollout = Rollout(prompt_ids, prompt_mask, params)
    for column in range(int(produced.max())):
        if rollout.append(new_tokens[:, column], new_logp[:, column]):
            break
    return rollout.output()
