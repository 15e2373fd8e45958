"""Tripwire for patches/Megatron-LM/experimental-attention-spec-local-backend.patch.

Qwen3-Next and Qwen3.5 (gated delta net layers between attention layers) and GLM-5 /
DeepSeek-V4 (sparse attention) build their decoder with megatron-core's
`get_transformer_block_with_experimental_attention_variant_spec`. At the pin its backend
choice asserts ``transformer_impl == "transformer_engine"`` and then names `TESpecProvider`,
which is only imported with Transformer Engine: without TE no such model gets a layer spec
(``NameError: name 'TESpecProvider' is not defined``, or the assertion with
``transformer_impl="local"``).

With the patch ``transformer_impl="local"`` gives the local backend: a gated delta net layer
projects with a plain column-parallel linear after the layer's own input norm (the local
backend has no fused norm + linear), the standard attention layers are the local GPT spec's,
and TE requested without TE installed is an
`ImportError` that names the fix. The oracle for the standard layers: the same block from
`get_gpt_decoder_block_spec(use_transformer_engine=False)` with the same weights gives the same
output. (The patch alone refuses sparse attention in one line; sparse-attention-local-backend.patch
builds it, tripwired in test_sparse_attention_local_spec.py.)
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

HIDDEN, HEADS, GROUPS, LAYERS, SEQ, BATCH = 32, 4, 2, 2, 6, 2


def _config(**overrides: object):
    from megatron.core.transformer.transformer_config import (
        MLATransformerConfig,
        TransformerConfig,
    )

    settings: dict[str, Any] = dict(
        num_layers=LAYERS,
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_query_groups=GROUPS,
        ffn_hidden_size=64,
        normalization="RMSNorm",
        activation_func=F.silu,
        gated_linear_unit=True,
        add_bias_linear=False,
        qk_layernorm=True,
        use_cpu_initialization=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        masked_softmax_fusion=False,
        transformer_impl="local",
        linear_conv_kernel_dim=4,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
    )
    settings.update(overrides)
    cls = MLATransformerConfig if settings.get("multi_latent_attention") else TransformerConfig
    return cls(**settings)


def test_gated_delta_net_layers_get_the_local_backend(mcore_parallel: None) -> None:
    from megatron.core.models.gpt.experimental_attention_variant_module_specs import (
        get_transformer_block_with_experimental_attention_variant_spec,
    )
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.identity_op import IdentityOp

    config = _config(experimental_attention_variant="gdn", linear_attention_freq=[1, 0])
    block = get_transformer_block_with_experimental_attention_variant_spec(config)
    # ModuleSpec.submodules is typed `object`: read the layer specs as Any.
    layer_specs: list[Any] = list(block.layer_specs or [])
    gdn_layer, attention_layer = layer_specs
    gdn = gdn_layer.submodules.self_attention
    assert gdn.submodules.in_proj is ColumnParallelLinear
    assert gdn.submodules.out_proj is RowParallelLinear
    assert gdn_layer.submodules.input_layernorm is not IdentityOp  # the norm before in_proj
    attention = attention_layer.submodules.self_attention.submodules
    assert attention.core_attention is DotProductAttention
    assert attention.linear_qkv is ColumnParallelLinear
    assert attention_layer.submodules.input_layernorm is not IdentityOp


def test_transformer_engine_without_it_names_the_fix(mcore_parallel: None) -> None:
    from megatron.core.models.gpt import experimental_attention_variant_module_specs as specs

    if specs.HAVE_TE:
        pytest.skip("Transformer Engine is installed: the refusal is for machines without it")
    config = _config(experimental_attention_variant="gdn", linear_attention_freq=[1, 0])
    config.transformer_impl = "transformer_engine"
    with pytest.raises(ImportError, match="transformer_impl='local'"):
        specs.get_transformer_block_with_experimental_attention_variant_spec(config)


def test_standard_layers_run_as_the_local_gpt_block(mcore_device: str) -> None:
    from megatron.core.models.gpt.experimental_attention_variant_module_specs import (
        get_transformer_block_with_experimental_attention_variant_spec,
    )
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer.transformer_block import TransformerBlock

    config = _config()  # no experimental variant: every layer is standard attention + MLP
    ours = TransformerBlock(
        config, get_transformer_block_with_experimental_attention_variant_spec(config)
    )
    reference = TransformerBlock(
        config, get_gpt_decoder_block_spec(config, use_transformer_engine=False)
    )
    reference.load_state_dict(ours.state_dict())
    hidden = torch.randn(SEQ, BATCH, HIDDEN, generator=torch.Generator().manual_seed(0))
    mask = torch.triu(torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool), diagonal=1)
    ours, reference = ours.to(mcore_device), reference.to(mcore_device)
    hidden, mask = hidden.to(mcore_device), mask.to(mcore_device)
    torch.testing.assert_close(ours(hidden, mask), reference(hidden, mask), rtol=0, atol=0)
