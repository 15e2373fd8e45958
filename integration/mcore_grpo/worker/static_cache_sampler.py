"""KV-cache sampling on megatron-core's `StaticInferenceContext`: one prefill, then one token
per forward.

Each layer's attention writes its keys and values into the context's preallocated
[max_len, B, ...] buffers at `sequence_len_offset` and attends over everything cached so far
(core_v0.19 `Attention._adjust_key_value_for_inference`). So a decode step costs one token's
forward plus attention over the cache, instead of the whole prefix (the recompute sampler).

Left-padded prompts stay exact under the cache because the mask and positions are explicit at
every step:
- prefill: each row's prompt described to megatron-core as one segment from its first real
  token (`SharedPrefixParams`, shared-prefix-attention.patch: causal attention over the real
  tokens, no mask built), positions counting real tokens; where the model's attention takes
  no segments (MLA, DSA, attention sinks, megatron-core without the patch)
  the causal + key-padding mask over the prompt ([B, 1, P, P], `prompt_mask_of`) instead.
  The prompts stay where they are (left-padded, ending at column P - 1): rotations by cache
  index (rope without `rope_from_position_ids`, MLA, yarn) then see the same distances
  between a prompt and its generated tokens as between its own tokens; left-aligned prompts
  would leave a gap of pad columns before the first generated one;
- decode: a [B, 1, 1, S] key-padding mask over all cached columns (pad columns and the
  columns of rows that already stopped stay masked), the new token's position = the row's
  real tokens before it. Both are kept up to date by the `Rollout` one column per step, so
  the step does no O(S) work of its own besides attention over the cache.
megatron-core's local attention applies a given mask as-is, and switches its mask type to
`no_mask` once `sequence_len_offset > 0`, which only stops it from adding an implicit causal
mask (a one-token query needs none).

Every tensor is created on the model's device; nothing here differs between CPU and CUDA (the
CPU redirects in `cpu.py` cover megatron's `torch.cuda.current_device()` buffer allocation).
"""

from __future__ import annotations

from typing import Any

import torch

from mcore_grpo.worker.forward import gpt_module, model_logits, token_positions
from mcore_grpo.worker.sampling import (
    GenerationOutput,
    Rollout,
    SamplingGenerator,
    SamplingParams,
    sample_next,
)
from mcore_grpo.worker.shared_prefill import distinct_prompts, expand_cache, experts_exchange_tokens


def cache_unsupported_reason(model: torch.nn.Module) -> str | None:
    """Why the static cache cannot run for this model, or None.

    Sequence parallelism splits the sequence across tensor-parallel ranks; a one-token decode
    step cannot be split (megatron-core's own static engine turns it off for inference).
    megatron-core's gated delta net 2 layers keep no inference state: their forward raises
    NotImplementedError with an inference context. Its Mamba (NemotronH, FalconH1) and gated
    delta net layers (Qwen3-Next, Qwen3.5) keep one; they decode through it (`state_sampler`)."""
    from megatron.core import parallel_state

    from mcore_grpo.worker.layer_types import stateless_decode_types

    config = getattr(model, "config", None)
    tp = parallel_state.get_tensor_model_parallel_world_size()
    if config is not None and getattr(config, "sequence_parallel", False) and tp > 1:
        return "sequence parallelism cannot split a one-token decode step across TP ranks"
    stateless = stateless_decode_types()
    if stateless and any(isinstance(m, stateless) for m in model.modules()):
        return "megatron-core's gated delta net 2 layers keep no inference state"
    return None


@torch.no_grad()
def generate_static_cache(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    params: SamplingParams,
    vocab_size: int,
    generator: SamplingGenerator = None,
    share_prefill: bool = True,
) -> GenerationOutput:
    """Sample up to `max_new_tokens` per row: prefill the prompt, then one-token decode steps
    over the KV cache. Same semantics (and, for the same logits, the same draws) as
    `recompute_sampler.generate_recompute`.

    `share_prefill`: rows with the same prompt (a GRPO group) are prefilled once and share
    its cache (`shared_prefill.py`); False prefills every row (the reference in tests)."""
    from megatron.core.inference.contexts import StaticInferenceContext
    from megatron.core.inference.utils import InferenceMode

    rollout = Rollout(prompt_ids, prompt_mask, params)
    batch, plen = prompt_ids.shape
    context = StaticInferenceContext(batch, plen + params.max_new_tokens)
    share_prefill = share_prefill and not experts_exchange_tokens()
    groups = distinct_prompts(prompt_ids, prompt_mask) if share_prefill else None
    shared = groups if groups is not None and groups.shared else None
    rows = shared.first if shared is not None else slice(None)
    # InferenceMode: megatron-core materialises only the last position's logits (the static
    # context is configured with materialize_only_last_token_logits), sparing a [P, B, V]
    # output projection at prefill.
    with InferenceMode.active():
        valid = rollout.mask[rows, :plen].bool()
        mask, segments = prompt_attention(model, valid)
        logits = model_logits(
            model, rollout.ids[rows, :plen], token_positions(valid), mask, context, segments
        )
        if shared is not None:
            expand_cache(context, shared, plen)
            logits = logits[shared.inverse]
        context.increment_sequence_len_offset(plen)
        context.enable_decode_mode()
        while not rollout.append(*sample_next(logits[:, -1, :], params, vocab_size, generator)):
            n = rollout.length
            # Mask and position are kept column by column by the rollout (O(B) per step),
            # not rebuilt over all n columns; the mask is a view of its first n columns.
            key_padding = rollout.key_padding[..., :n]
            logits = model_logits(
                model, rollout.ids[:, n - 1 : n], rollout.last_position(), key_padding, context
            )
            context.increment_sequence_len_offset(1)
    return rollout.output()


def prompt_attention(model: torch.nn.Module, valid: torch.Tensor) -> tuple[Any, Any]:
    """(mask, segments) for the prefill of left-padded prompts (`valid`: [B, P] real tokens):
    megatron-core's `SharedPrefixParams` with one segment per row, from its first real token
    to the end, and no mask; the dense [B, 1, P, P] mask only where the model's attention
    takes no segments (`prefill_segments_reason`) or a row holds no real token."""
    lengths = valid.sum(dim=1).tolist()
    if prefill_segments_reason(model) is not None or 0 in lengths:
        return prompt_mask_of(valid), None
    from megatron.core.transformer.shared_prefix_attention import (
        PrefixSegment,
        SharedPrefixParams,
    )

    width = valid.shape[1]
    segments = tuple(PrefixSegment(row, width - n, n) for row, n in enumerate(lengths))
    # max_seqlen: what GPTModel sizes index-based rotary tables by when given packed params.
    return None, SharedPrefixParams(segments=segments, max_seqlen_q=width, max_seqlen_kv=width)


def prefill_segments_reason(model: torch.nn.Module) -> str | None:
    """Why this model's prefill cannot attend by segments, or None.

    A prompt's prefill is one root segment per row: nothing is shared along the row, so what
    rules shared-prefix *training* out (recurrent state, MoE losses, rotation by index) does
    not matter here; only what the patched attention refuses or never sees does."""
    from mcore_grpo.worker.shared_prefix import attention_reason, segment_attention_available

    if not segment_attention_available():
        return "megatron-core without shared-prefix-attention.patch"
    config = gpt_module(model).config
    if getattr(config, "multi_latent_attention", False):
        return (
            "multi-latent attention rotates by the cache's offset when it prefills, not by segments"
        )
    if getattr(config, "experimental_attention_variant", None) is not None:
        return "an experimental attention variant reads no SharedPrefixParams"
    if getattr(config, "softmax_type", "vanilla") != "vanilla":
        return "a softmax offset (attention sinks) is refused with SharedPrefixParams"
    return attention_reason(model)


def prompt_mask_of(valid: torch.Tensor) -> torch.Tensor:
    """[B, 1, P, P] bool, True = masked: causal plus key padding over left-padded prompts
    (megatron-core's local attention uses a given mask as-is, so both parts are needed)."""
    seq = valid.shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=valid.device).triu(1)
    return causal[None, None, :, :] | ~valid[:, None, None, :]
