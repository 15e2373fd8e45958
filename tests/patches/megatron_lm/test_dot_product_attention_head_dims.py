"""Tripwire for patches/Megatron-LM/pr6564-fix-local-mla-dot-product-attention-channel.patch
(NVIDIA/Megatron-LM#6564, adopted in the place of our dot-product-attention-mla-head-dims.patch,
now in patches/Megatron-LM/upstreamed/: the same fix, so the same tripwire).

Multi-latent attention (DeepSeek-V2/V3, Kimi, GLM-4.7-Flash, ...) builds its core attention with
`k_channels` (query/key head size: nope + rope part) and `v_channels` (value head size), which
differ. Transformer Engine's attention takes both; megatron-core's own `DotProductAttention`, the
local spec's, takes neither, so an MLA model without TE fails to build:

    TypeError: DotProductAttention.__init__() got an unexpected keyword argument 'k_channels'

With the patch it accepts both: keys of `k_channels`, values and output of `v_channels` per head.
The oracle is torch's `scaled_dot_product_attention` (causal, scale 1/sqrt(k_channels)).
"""

from __future__ import annotations

import math

import torch

HEADS, K_DIM, V_DIM, SEQ, BATCH = 2, 24, 16, 5, 3


def test_mla_head_sizes_build_and_attend_like_torch(mcore_device: str) -> None:
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType

    config = TransformerConfig(
        num_layers=1,
        hidden_size=32,
        num_attention_heads=HEADS,
        kv_channels=K_DIM,
        use_cpu_initialization=True,
        masked_softmax_fusion=False,
        attention_dropout=0.0,
    )
    attention = DotProductAttention(
        config=config,
        layer_number=1,
        attn_mask_type=AttnMaskType.causal,
        attention_type="self",
        softmax_scale=1 / math.sqrt(K_DIM),
        k_channels=K_DIM,
        v_channels=V_DIM,
    )
    g = torch.Generator().manual_seed(0)
    query, key, value = (
        torch.randn(SEQ, BATCH, HEADS, dim, generator=g).to(mcore_device)  # [s, b, heads, dim]
        for dim in (K_DIM, K_DIM, V_DIM)
    )
    out = attention.to(mcore_device)(query, key, value, attention_mask=None)

    q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, heads, s, dim]
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = expected.permute(2, 0, 1, 3).reshape(SEQ, BATCH, HEADS * V_DIM)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
