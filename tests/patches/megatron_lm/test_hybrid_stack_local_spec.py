"""Tripwire for patches/Megatron-LM/hybrid-stack-local-spec-without-te.patch.

megatron-core's local hybrid stack spec (`get_hybrid_stack_modelopt_spec(local_core_attention=
True)`: local linears and attention) still built Transformer Engine's norms, and `HybridStack`
always built a `TENorm` as its final norm: without TE no hybrid model (NemotronH, FalconH1,
Qwen3-Next as a hybrid stack) could be built. With the patch both are megatron-core's torch
norms where TE is absent.

Oracles: the block's norms are torch's RMSNorm, and a NemotronH checkpoint through Bridge
matches `transformers` (this also needs the Mamba fallback patch before it and Bridge's
hybrid-local-spec patch).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from tests.support.model_checks import LOGITS_DIFFERENCE, child_figure

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformer_engine") is not None,
    reason="Transformer Engine is installed here: the TE norms build",
)


def test_local_hybrid_stack_builds_with_torch_norms(mcore_device: str) -> None:
    from megatron.core import parallel_state
    from megatron.core.models.hybrid.hybrid_block import HybridStack
    from megatron.core.models.hybrid.hybrid_layer_allocation import validate_segment_layers
    from megatron.core.post_training.modelopt.hybrid.model_specs import (
        get_hybrid_stack_modelopt_spec,
    )
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer import TransformerConfig

    layers = validate_segment_layers("*-")
    config = TransformerConfig(
        num_layers=len(layers),
        hidden_size=32,
        num_attention_heads=4,
        normalization="RMSNorm",
        use_cpu_initialization=True,
    )
    groups = ProcessGroupCollection(
        tp=parallel_state.get_tensor_model_parallel_group(),
        pp=parallel_state.get_pipeline_model_parallel_group(),
        cp=parallel_state.get_context_parallel_group(),
    )
    spec = cast(Any, get_hybrid_stack_modelopt_spec(local_core_attention=True))
    block = HybridStack(
        config, spec.submodules, layer_type_list=layers, pp_layer_offset=0, pg_collection=groups
    ).to(mcore_device)
    assert isinstance(block.final_norm, torch.nn.RMSNorm)
    assert isinstance(block.layers[0].input_layernorm, torch.nn.RMSNorm)
    assert isinstance(block.layers[1].pre_mlp_layernorm, torch.nn.RMSNorm)
    mask = torch.ones(1, 1, 6, 6, dtype=torch.bool, device=mcore_device).triu(1)
    out = block(torch.randn(6, 2, 32, device=mcore_device), attention_mask=mask)
    assert out.shape == (6, 2, 32) and torch.isfinite(out).all()


@pytest.mark.timeout(600)
def test_nemotron_h_checkpoint_matches_transformers(tmp_path: Path) -> None:
    from model_matrix import families

    checkpoint = tmp_path / "nemotron_h"
    families.write_checkpoint(checkpoint, "NemotronHForCausalLM")
    diff = child_figure(LOGITS_DIFFERENCE, str(checkpoint))
    assert diff <= 1e-4, diff
