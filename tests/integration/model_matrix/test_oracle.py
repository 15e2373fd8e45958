"""The matrix oracle's corrections (`model_matrix.oracle`) against transformers' own code.

The GLM-5 correction rotates interleaved RoPE pairs with 5.8.1's half-split function; the
reference is transformers' own `apply_rotary_pos_emb_interleave` (DeepSeek-V3's, the function
5.23 calls for GLM-5), not a formula written here.
"""

from __future__ import annotations

import torch
from model_matrix import oracle


def test_interleaved_rope_is_transformers_deepseek_v3_interleave() -> None:
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        apply_rotary_pos_emb_interleave,
    )
    from transformers.models.glm_moe_dsa import modeling_glm_moe_dsa as glm5

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 5, 8, generator=g), torch.randn(2, 1, 5, 8, generator=g)
    angles = torch.randn(2, 5, 4, generator=g).repeat(1, 1, 2)  # [B, S, D]: two halves alike
    cos, sin = angles.cos(), angles.sin()

    expected_q, expected_k = apply_rotary_pos_emb_interleave(q, k, cos, sin)
    rotate = oracle.interleaved(glm5.apply_rotary_pos_emb)
    torch.testing.assert_close(rotate(q, cos, sin, unsqueeze_dim=1), expected_q)
    torch.testing.assert_close(rotate(k, cos, sin, unsqueeze_dim=1), expected_k)
    # ... and differs from the half-split rotation the pinned release applies.
    assert (glm5.apply_rotary_pos_emb(q, cos, sin, unsqueeze_dim=1) - expected_q).abs().max() > 0.1


def test_the_correction_is_undone_after_the_block() -> None:
    from transformers.models.glm_moe_dsa import modeling_glm_moe_dsa as glm5

    original = glm5.apply_rotary_pos_emb
    with oracle.corrected("GlmMoeDsaForCausalLM"):
        assert glm5.apply_rotary_pos_emb is not original
    assert glm5.apply_rotary_pos_emb is original
    with oracle.corrected("LlamaForCausalLM"):
        assert glm5.apply_rotary_pos_emb is original
