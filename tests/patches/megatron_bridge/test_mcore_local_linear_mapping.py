"""Tripwire for patches/Megatron-Bridge/mcore-local-linear-replicated.patch.

Without Transformer Engine, megatron-core's local backend builds the DSA indexer's projections
(GLM-5, DeepSeek-V3.2) and absorbed MLA's down projections with its local duplicated `Linear`
(`megatron/core/post_training/modelopt/layers.py`). Bridge's `AutoMapping` knew no module of
that name: every GLM-5 import on the local backend stopped at
`ValueError: Cannot determine parallelism type for module 'Linear' at weight
'decoder.layers.0.self_attention.core_attention.indexer.linear_weights_proj.weight'`.

With the patch that `Linear` maps as replicated, which it is (its whole weight on every
tensor-parallel rank): the checkpoint's tensor goes in unchanged and comes back unchanged.
A plain `torch.nn.Linear` stays ambiguous, as before.
"""

from __future__ import annotations

import pytest
import torch


def _local_linear() -> torch.nn.Module:
    from megatron.core.post_training.modelopt.layers import Linear
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(
        num_layers=1, hidden_size=16, num_attention_heads=2, use_cpu_initialization=True
    )
    return Linear(
        16,
        8,
        config=config,
        init_method=torch.nn.init.zeros_,
        bias=False,
        parallel_mode="duplicated",
    )


def test_local_duplicated_linear_converts_as_replicated(mcore_parallel: None) -> None:
    from megatron.bridge.models.conversion.param_mapping import AutoMapping

    linear = _local_linear()
    mapping = AutoMapping(
        "decoder.layers.0.self_attention.core_attention.indexer.linear_wk.weight",
        "model.layers.0.self_attn.indexer.wk.weight",
    )
    hf_weight = torch.randn(8, 16, generator=torch.Generator().manual_seed(0))
    megatron_weight = mapping.hf_to_megatron(hf_weight, linear)
    torch.testing.assert_close(megatron_weight, hf_weight, rtol=0, atol=0)
    exported = mapping.megatron_to_hf(megatron_weight, linear)
    torch.testing.assert_close(
        exported["model.layers.0.self_attn.indexer.wk.weight"], hf_weight, rtol=0, atol=0
    )


def test_plain_torch_linear_is_still_ambiguous() -> None:
    from megatron.bridge.models.conversion.param_mapping import AutoMapping

    with pytest.raises(ValueError, match="Cannot determine parallelism type"):
        AutoMapping("x.weight", "y.weight")._detect_parallelism_type(torch.nn.Linear(4, 4))
