"""One forward pass of the policy: positions, full-vocab logits, real-vocab logprobs."""

from __future__ import annotations

import inspect
import weakref
from typing import Any

import torch


def token_positions(valid: torch.Tensor) -> torch.Tensor:
    """[B, S] positions counting real tokens only (0 on leading pads), so a left-padded row
    sees the positions of the unpadded one."""
    return (valid.long().cumsum(dim=1) - 1).clamp(min=0)


def gpt_module(model: torch.nn.Module) -> Any:
    """The megatron-core language model inside DDP / Float16Module wrappers."""
    for module in model.modules():
        if hasattr(module, "position_embedding_type") and hasattr(module, "decoder"):
            return module
    raise TypeError(f"no megatron-core language model (GPTModel) inside {type(model).__name__}")


# `has_recurrent_layers` per model (weakly held: a model's lifetime is the caller's).
_RECURRENT: weakref.WeakKeyDictionary[torch.nn.Module, bool] = weakref.WeakKeyDictionary()


def has_recurrent_layers(model: torch.nn.Module) -> bool:
    """Whether `model` holds a layer with a recurrent state (Mamba-2, gated delta net).

    megatron-core's Mamba and gated delta net layers take no padding mask (its training feeds
    them packed sequences): a left pad enters their state and changes every later token's
    output (measured on the tiny NemotronH and Qwen3.5 rows: 0.04 and 0.10 in the logits).
    Cached per model, whose layers do not change.
    """
    cached = _RECURRENT.get(model)
    if cached is None:
        from mcore_grpo.worker.layer_types import recurrent_layer_types

        kinds = recurrent_layer_types()
        cached = any(isinstance(m, kinds) for m in model.modules())
        _RECURRENT[model] = cached
    return cached


def leading_pads(valid: torch.Tensor) -> torch.Tensor:
    """[B]: how many padding positions precede each row's first real token (0 for a row with
    none, or with no real token)."""
    valid = valid.bool()
    first = valid.long().argmax(dim=1)
    return torch.where(valid.any(dim=1), first, torch.zeros_like(first))


def roll_rows(x: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """Each row of `x` ([B, S, ...]) rotated left by its shift: out[b, j] = x[b, (j + s_b) % S]."""
    seq = x.shape[1]
    index = (torch.arange(seq, device=x.device)[None, :] + shifts[:, None]) % seq
    index = index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, index)


def model_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    mask: torch.Tensor | None,
    inference_context: Any = None,
    packed_seq_params: Any = None,
    padding_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """[B, S', V] fp32 logits for explicit positions and mask, gathered across TP ranks.

    `inference_context`: megatron-core's KV-cache context (the cached sampler); then S' may be
    1 (only the last position's logits are materialised) and the output layer gathers the TP
    shards itself (megatron-core's inference mode requires `runtime_gather_output`).
    `packed_seq_params`: how the rows are packed (megatron-core's `SharedPrefixParams` for
    shared-prefix rows, whose segments then are the whole mask). `padding_mask` ([B, S'],
    True = padding): the columns an MoE router leaves out of its losses (`moe_padding_mask`)."""
    from megatron.core import parallel_state, tensor_parallel

    packing = forward_packing(packed_seq_params, padding_mask)
    if inference_context is not None:
        logits = model(
            input_ids,
            positions,
            mask,
            inference_context=inference_context,
            runtime_gather_output=True,
            **packing,
        )
        return logits.float()
    logits = model(input_ids, positions, mask, **packing)
    if parallel_state.get_tensor_model_parallel_world_size() > 1:
        logits = tensor_parallel.gather_from_tensor_model_parallel_region(logits)
    return logits.float()


def forward_packing(packed_seq_params: Any, padding_mask: torch.Tensor | None) -> dict[str, Any]:
    """The model forward's packing arguments, only those given: some models' forward takes no
    packed_seq_params (Falcon-H1's) or no padding_mask (megatron-core's MambaModel)."""
    packing: dict[str, Any] = {}
    if packed_seq_params is not None:
        packing["packed_seq_params"] = packed_seq_params
    if padding_mask is not None:
        packing["padding_mask"] = padding_mask
    return packing


def moe_padding_mask(model: torch.nn.Module, padding: torch.Tensor) -> torch.Tensor | None:
    """`padding` ([B, S], True where no real token) for the forward of a model with MoE
    routers, which then leave those columns out of their auxiliary and z losses and expert
    bias counts (megatron-core's `padding_mask`), so whole rows count what shared-prefix rows
    count; None for dense models and for forwards that take no padding mask (MambaModel's)."""
    gpt = gpt_module(model)
    if not getattr(gpt.config, "num_moe_experts", None):
        return None
    if "padding_mask" not in inspect.signature(gpt.forward).parameters:
        return None
    return padding


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


def check_targets(targets: torch.Tensor, vocab_size: int, caller: str) -> None:
    """Raise ValueError for a target id at or beyond `vocab_size` (a padded-vocab id is never a
    token; its logprob would be -inf)."""
    if not targets.numel():
        return
    largest = int(targets.max())
    if largest >= vocab_size:
        raise ValueError(
            f"{caller}: input id {largest} >= tokenizer vocab size {vocab_size} (ids beyond it "
            "are model padding); check the batch's input_ids and WorkerConfig.model.vocab_size."
        )


def next_token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, vocab_size: int, temperature: float = 1.0
) -> torch.Tensor:
    """[B, S-1]: log p(input_ids[:, t+1] | prefix up to t), over the `vocab_size` real ids,
    at `temperature` (the sampler's, so the scored distribution is the sampled one).

    Raises ValueError for an input id at or beyond `vocab_size` (a padded-vocab id is never
    a token; its logprob would be -inf).
    """
    targets = input_ids[:, 1:]
    check_targets(targets, vocab_size, "next_token_logprobs")
    # Scored at every position (the last one's target is a stand-in, dropped after): slicing
    # the [B, S, V] logits instead would copy them, and its backward zero-fill and copy them.
    padded_targets = torch.cat([targets, torch.zeros_like(input_ids[:, :1])], dim=1)
    logp = TargetLogprob.apply(logits, padded_targets, vocab_size, temperature)
    return logp[:, :-1]


# Elements of one logsumexp temporary: 64 Mi fp32 values (256 MiB).
LSE_CHUNK_ELEMENTS = 1 << 26


def chunked_logsumexp(real: torch.Tensor, scale: float) -> torch.Tensor:
    """logsumexp(real * scale, -1), a slab of leading rows at a time.

    `torch.logsumexp` materialises `exp(x - max)` as large as its input: over a whole batch's
    fp32 logits that doubled them (Qwen2.5-1.5B's 32 x 512 x 151,936 on an H200: `get_logprobs`
    peaked at 44.7 GiB against megatron-core's bare forward's 40.1). Slabs of dim 0 are views,
    each row's sum is its own, so the values are the same; the temporary is one slab's.
    """

    def lse(part: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(part * scale if scale != 1.0 else part, dim=-1)

    if real.dim() < 2 or real.numel() <= LSE_CHUNK_ELEMENTS:
        return lse(real)
    rows = max(1, LSE_CHUNK_ELEMENTS // real[0].numel())
    return torch.cat([lse(part) for part in real.split(rows, dim=0)], dim=0)


class TargetLogprob(torch.autograd.Function):
    """log softmax(logits / temperature)[target] over the first `vocab_size` ids, [...].

    The same values as `log_softmax(real_vocab_logits(logits / t)).gather(target)`, with one
    [..., V] temporary in the forward (inside `logsumexp`) and one in the backward (the
    gradient itself: (onehot - softmax) * grad / t). The composed version keeps the
    log_softmax output, zero-fills a gradient for `gather` and adds log_softmax's own: at
    SmolLM2's 49,152 ids and 8 x 256 tokens each such tensor is 400 MB, and those passes were
    about a tenth of a CPU train step.

    `rows` ([n] indices into [u, V] logits), when given: prediction i is read from logits row
    `rows[i]`, so one row may serve several predictions (a shared prompt's last token predicts
    every sample's first token) and the [u, V] gradient is still one tensor, not n rows.
    """

    @staticmethod
    def forward(  # pyrefly: ignore[bad-override]
        ctx: Any,
        logits: torch.Tensor,
        targets: torch.Tensor,
        vocab_size: int,
        temperature: float,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """[..., V] logits (any strides), [...] target ids below `vocab_size` -> [...]; with
        `rows`, [u, V] logits, [n] rows and targets -> [n]."""
        real = logits[..., :vocab_size]
        scale = 1.0 / temperature
        lse = chunked_logsumexp(real, scale)
        if rows is None:
            picked = real.gather(-1, targets[..., None]).squeeze(-1) * scale
            out = picked - lse
        else:
            out = real[rows, targets] * scale - lse[rows]
        ctx.save_for_backward(logits, lse, targets, rows)
        ctx.vocab_size, ctx.scale = vocab_size, scale
        return out

    @staticmethod
    def backward(  # pyrefly: ignore[bad-override]
        ctx: Any, grad: torch.Tensor
    ) -> tuple[torch.Tensor, None, None, None, None]:
        """d/dlogits = (onehot(target) - softmax) * grad * scale; 0 on the padded ids."""
        logits, lse, targets, rows = ctx.saved_tensors
        vocab, scale = ctx.vocab_size, ctx.scale
        # Each logits row's softmax is weighted by the sum of its predictions' gradients.
        weight = grad if rows is None else grad.new_zeros(lse.shape).index_add_(0, rows, grad)
        g = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        real = g[..., :vocab]
        torch.mul(logits[..., :vocab], scale, out=real)
        real.sub_(lse[..., None]).exp_().mul_(weight[..., None] * -scale)
        if rows is None:
            real.scatter_add_(-1, targets[..., None], (grad * scale)[..., None])
        else:
            real.index_put_((rows, targets), grad * scale, accumulate=True)
        g[..., vocab:] = 0
        return g, None, None, None, None
