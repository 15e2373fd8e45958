"""Tripwire for patches/Megatron-LM/mla-latent-layernorm-epsilon.patch.

Multi-latent attention norms its query and key-value latents (DeepSeek's q_a_layernorm and
kv_a_layernorm). megatron-core built those norms with the model's `layernorm_epsilon`, but
DeepSeek-style checkpoints use 1e-6 there whatever their `rms_norm_eps`: every transformers
MLA model builds them with its RMSNorm's default, 1e-6. GLM-4.7-Flash and GLM-5 set
rms_norm_eps 1e-5, so their latents were normed with the wrong epsilon (5.7e-05 logits off on
the model matrix's tiny GLM-4.7-Flash, 1.2e-07 with the fix).

With the patch `MLATransformerConfig.latent_layernorm_epsilon` sets the latent norms' epsilon.
The oracle is transformers' own DeepSeek-V3 RMSNorm at its default epsilon; the model's
epsilon here is 1e-2, so a norm built with it is far off.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def _layer(**overrides: Any) -> Any:
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import MLATransformerConfig

    settings: dict[str, Any] = dict(
        num_layers=1,
        hidden_size=32,
        num_attention_heads=4,
        normalization="RMSNorm",
        activation_func=F.silu,
        gated_linear_unit=True,
        add_bias_linear=False,
        use_cpu_initialization=True,
        q_lora_rank=16,
        kv_lora_rank=16,
        qk_head_dim=8,
        qk_pos_emb_head_dim=8,
        v_head_dim=8,
        rope_type="rope",
        qk_layernorm=True,
        layernorm_epsilon=1e-2,
    )
    settings.update(overrides)
    spec = get_gpt_layer_local_spec(
        multi_latent_attention=True, qk_layernorm=True, normalization="RMSNorm"
    )
    return build_module(spec, config=MLATransformerConfig(**settings), layer_number=1)


def test_mla_latent_norms_use_the_latent_epsilon(mcore_device: str) -> None:
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RMSNorm

    attention = _layer(latent_layernorm_epsilon=1e-6).to(mcore_device).self_attention
    x = 1e-2 * torch.randn(3, 16, generator=torch.Generator().manual_seed(0)).to(mcore_device)
    for norm in (attention.q_layernorm, attention.kv_layernorm):
        reference = DeepseekV3RMSNorm(16).to(mcore_device)  # eps: transformers' default
        with torch.no_grad():
            reference.weight.copy_(norm.weight + 0.1)
            norm.weight.copy_(reference.weight)
            torch.testing.assert_close(norm(x), reference(x))
