"""Tripwire for patches/Megatron-Bridge/ernie-local-spec-without-transformer-engine.patch.

ERNIE 4.5-MoE's bridge builds its per-layer (dense first, then MoE) block spec with
`get_gpt_decoder_block_spec(..., use_transformer_engine=True)`, where the other MoE bridges
(DeepSeek, GLM, Bailing, HY) pass `HAVE_TE`. Without Transformer Engine megatron-core's TE spec
provider is None, so building the spec fails with `TypeError: 'NoneType' object is not
callable` (gpt_layer_specs.py) and no ERNIE checkpoint builds on a machine without TE. With the
patch the spec is megatron-core's local one there, still dense for layer 0 and MoE after.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformer_engine") is not None,
    reason="Transformer Engine is installed here: the TE spec builds",
)


def test_ernie_block_spec_builds_without_transformer_engine(mcore_parallel: None) -> None:
    from megatron.bridge.models.ernie.ernie_45_bridge import _ernie45_decoder_block_spec
    from megatron.bridge.models.gpt_provider import GPTModelProvider
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear
    from megatron.core.transformer.mlp import MLP
    from megatron.core.transformer.moe.moe_layer import MoELayer

    provider = GPTModelProvider(
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        ffn_hidden_size=128,
        num_moe_experts=4,
        moe_ffn_hidden_size=32,
        moe_layer_freq=[0, 1],
    )
    spec: Any = _ernie45_decoder_block_spec(provider)
    dense, moe = (layer.submodules.mlp for layer in spec.layer_specs)  # functools.partials
    assert dense.func.__self__ is MLP and moe.func is MoELayer  # layer 0 dense, layer 1 MoE
    assert dense.keywords["submodules"].linear_fc1 is ColumnParallelLinear  # the local spec
