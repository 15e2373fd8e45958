"""megatron-core's local `DotProductAttention`, computed by `torch.nn.functional.scaled_dot_product_attention`.

The local layer spec (no Transformer Engine: every CPU run) attends with `baddbmm`, a masked
softmax and `bmm`, and repeats each grouped-query key and value head `heads / groups` times
first (core_v0.19 transformer/dot_product_attention.py:174-244). On 2 cores that is about an
eighth of a SmolLM2-135M train step (materialised [B, heads, S, S] scores, and their backward)
and the key/value copy of every cached column at every decode step. torch's fused kernel does
the same math without either, as `transformers` runs it.

Same semantics where it takes over: megatron's mask is boolean, True = masked, and it *sets*
masked scores to -10000 (`attention_mask_func`); here -10000 is *added*. A row with an
unmasked key gets exactly zero weight on the masked ones either way (exp underflows in fp32).
A row with every key masked (a left-pad query) gets some finite average in both; such rows
are never scored. Everything it does not cover runs megatron's own forward unchanged: bf16 and
fp16 (megatron's softmax-in-fp32 casts), attention dropout while training (megatron's RNG
tracker), sliding windows, learnable softmax offsets, query-key layer scaling, and heads of
different key and value widths.
"""

from __future__ import annotations

from typing import Any

import torch
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.enums import AttnMaskType

MASKED_SCORE = -10000.0  # megatron-core's attention_mask_func


class SDPADotProductAttention(DotProductAttention):
    """`DotProductAttention` whose float32 forward is torch's SDPA; adds no state."""

    def _sdpa_applies(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, extras: tuple[Any, ...]
    ) -> bool:
        """Whether SDPA computes what megatron's forward would (`extras`: its attention bias
        and packed-sequence arguments, which megatron's local forward refuses itself)."""
        return (
            query.dtype == torch.float32
            and all(extra is None for extra in extras)
            and self.softmax_offset is None
            and not self.config.apply_query_key_layer_scaling
            and self.scale_mask_softmax.window_size is None
            and not (self.training and self.attention_dropout.p > 0)
            and key.size(-1) == value.size(-1)
        )

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_mask_type: AttnMaskType | None = None,
        attention_bias: torch.Tensor | None = None,
        packed_seq_params: Any = None,
    ) -> torch.Tensor:
        """[sq, b, np, hn] queries, [sk, b, ng, hn] keys and values -> [sq, b, np * hn]."""
        sq = query.size(0)
        # megatron builds a causal mask only when none is given and more than one query comes.
        causal = (
            attention_mask is None
            and self.scale_mask_softmax.attn_mask_type == AttnMaskType.causal
            and sq > 1
        )
        if (
            (attention_mask is not None and attention_mask.dtype != torch.bool)
            or (causal and sq != key.size(0))
            or not self._sdpa_applies(query, key, value, (attention_bias, packed_seq_params))
        ):
            return super().forward(
                query, key, value, attention_mask, attn_mask_type, attention_bias, packed_seq_params
            )
        mask = None
        if attention_mask is not None:
            mask = torch.zeros(attention_mask.shape, dtype=query.dtype, device=query.device)
            mask.masked_fill_(attention_mask, MASKED_SCORE)
        context = torch.nn.functional.scaled_dot_product_attention(
            query.permute(1, 2, 0, 3),  # [b, np, sq, hn]
            key.permute(1, 2, 0, 3),
            value.permute(1, 2, 0, 3),
            attn_mask=mask,
            is_causal=causal,
            scale=self.softmax_scale,
            enable_gqa=self.num_attention_heads_per_partition
            != self.num_query_groups_per_partition,
        )
        # [b, np, sq, hn] -> [sq, b, np * hn]
        return context.permute(2, 0, 1, 3).reshape(sq, query.size(1), -1)


def use_sdpa(model: torch.nn.Module) -> int:
    """Make every local `DotProductAttention` in `model` an `SDPADotProductAttention` (the
    subclass adds no state, so the class is switched in place: the built-in and Bridge-built
    models alike, whatever built their layer spec); how many were switched."""
    switched = 0
    for module in model.modules():
        if type(module) is DotProductAttention:
            module.__class__ = SDPADotProductAttention
            switched += 1
    return switched
