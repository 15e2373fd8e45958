"""Tripwire for patches/Megatron-Bridge/moe-local-experts-mappings.patch.

Without Transformer Engine (or with `moe_grouped_gemm=False`) megatron-core's local layer spec
builds the routed experts as `SequentialMLP`, whose weights are named
`mlp.experts.local_experts.<i>.linear_fc{1,2}.weight`, not TEGroupedMLP's
`mlp.experts.linear_fc{1,2}.weight<i>`. GLM45Bridge (Glm4MoeForCausalLM) and ExaoneMoeBridge map
only the grouped names, so `build_conversion_tasks` finds no mapping for any routed-expert weight
("No mapping found for megatron_param: ...local_experts.0.linear_fc1.weight"), leaves its task
None, and `load_hf_weights` fails with `AttributeError: 'NoneType' object has no attribute
'megatron_module'` (model_bridge.py:1303). The other MoE bridges (Qwen3-MoE, DeepSeek, GPT-OSS,
Qwen3-Next, ...) map both names. With the patch these two do too, and every parameter of a
local-spec MoE layer resolves to expert <i>'s Hugging Face weights.

The names come from a real local-spec MoE layer built here, not from strings in the test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast
from unittest.mock import Mock

import pytest

NUM_EXPERTS = 4


@pytest.fixture
def local_moe_param_names(mcore_device: str) -> list[str]:
    """`decoder.layers.1.<name>` of every parameter of a local-spec decoder layer with a
    (SequentialMLP) MoE MLP, as the bridges' providers build it without Transformer Engine."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        ffn_hidden_size=128,
        num_moe_experts=NUM_EXPERTS,
        moe_ffn_hidden_size=32,
        moe_router_topk=2,
        moe_shared_expert_intermediate_size=32,
        gated_linear_unit=True,
        add_bias_linear=False,
        normalization="RMSNorm",
        moe_token_dispatcher_type="allgather",
        use_cpu_initialization=True,
    )
    spec = get_gpt_layer_local_spec(num_experts=NUM_EXPERTS, moe_grouped_gemm=False)
    layer = cast(Any, build_module(spec, config=config, layer_number=2))
    names = [f"decoder.layers.1.{n}" for n, _ in layer.named_parameters()]
    assert any(".experts.local_experts.3.linear_fc1.weight" in n for n in names)  # SequentialMLP
    return names


def _glm45(fused: bool = False, mtp: int = 0) -> Any:
    from megatron.bridge.models.glm.glm45_bridge import GLM45Bridge
    from transformers import Glm4MoeConfig

    bridge = GLM45Bridge()
    bridge.hf_config = cast(Any, Glm4MoeConfig)(
        num_hidden_layers=2,
        n_routed_experts=NUM_EXPERTS,
        first_k_dense_replace=1,
        num_nextn_predict_layers=mtp,
    )
    bridge.hf_pretrained = Mock()
    bridge.hf_pretrained.state.source.has_glob.side_effect = lambda pattern: (
        fused
        and pattern
        in {
            "*mlp.experts.gate_up_proj*",
            "*mlp.experts.down_proj*",
        }
    )
    return bridge


def _exaone_moe() -> Any:
    from megatron.bridge.models.exaone.exaone_moe.exaone_moe_bridge import ExaoneMoeBridge
    from transformers import ExaoneMoeConfig

    bridge = ExaoneMoeBridge()
    bridge.hf_config = ExaoneMoeConfig(num_hidden_layers=2, num_experts=NUM_EXPERTS)
    return bridge


@pytest.mark.parametrize(
    "make_bridge", [_glm45, _exaone_moe], ids=["GLM45Bridge", "ExaoneMoeBridge"]
)
def test_every_local_spec_moe_parameter_has_a_mapping(
    make_bridge: Callable[[], Any], local_moe_param_names: list[str]
) -> None:
    registry = make_bridge().mapping_registry()
    unmapped = [n for n in local_moe_param_names if registry.megatron_to_hf_lookup(n) is None]
    assert not unmapped, f"no Bridge mapping for the local spec's {unmapped}"


@pytest.mark.parametrize(
    "make_bridge", [_glm45, _exaone_moe], ids=["GLM45Bridge", "ExaoneMoeBridge"]
)
def test_sequential_mlp_expert_maps_to_the_same_hf_expert(make_bridge: Callable[[], Any]) -> None:
    registry = make_bridge().mapping_registry()
    fc1 = registry.megatron_to_hf_lookup(
        "decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight"
    )
    fc2 = registry.megatron_to_hf_lookup(
        "decoder.layers.1.mlp.experts.local_experts.3.linear_fc2.weight"
    )
    assert fc1 is not None and fc2 is not None
    assert fc1.hf_param == {
        "gate": "model.layers.1.mlp.experts.3.gate_proj.weight",
        "up": "model.layers.1.mlp.experts.3.up_proj.weight",
    }
    assert fc2.hf_param == "model.layers.1.mlp.experts.3.down_proj.weight"


def test_glm45_sequential_mlp_with_fused_hf_experts_and_mtp() -> None:
    from megatron.bridge.models.conversion.param_mapping import (
        FusedExpertMapping,
        FusedGatedExpertMapping,
    )

    fused = _glm45(fused=True).mapping_registry()
    fc1 = fused.megatron_to_hf_lookup(
        "decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight"
    )
    fc2 = fused.megatron_to_hf_lookup(
        "decoder.layers.1.mlp.experts.local_experts.3.linear_fc2.weight"
    )
    assert (
        isinstance(fc1, FusedGatedExpertMapping)
        and fc1.hf_param == "model.layers.1.mlp.experts.gate_up_proj"
    )
    assert (
        isinstance(fc2, FusedExpertMapping)
        and fc2.hf_param == "model.layers.1.mlp.experts.down_proj"
    )

    with_mtp = _glm45(mtp=1).mapping_registry()
    mtp_fc1 = with_mtp.megatron_to_hf_lookup(
        "mtp.layers.0.transformer_layer.mlp.experts.local_experts.3.linear_fc1.weight"
    )
    assert mtp_fc1 is not None
    assert (
        cast(dict[str, str], mtp_fc1.hf_param)["gate"]
        == "model.layers.2.mlp.experts.3.gate_proj.weight"
    )
