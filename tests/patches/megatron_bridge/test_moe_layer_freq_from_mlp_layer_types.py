"""Tripwire for patches/Megatron-Bridge/moe-layer-freq-from-mlp-layer-types.patch.

transformers' `HYV3Config` and `GlmMoeDsaConfig` (GLM-5) describe which layers are dense and
which are MoE as `mlp_layer_types` and build the model from it; they define no
`first_k_dense_replace`. HYV3Bridge and GLM5Bridge read only `first_k_dense_replace`, so a config
that transformers writes fails with `AttributeError: 'HYV3Config' object has no attribute
'first_k_dense_replace'` (released configs still carry the old key as an extra, and convert
wrongly if the two disagree). With the patch `moe_layer_freq` follows `mlp_layer_types`, and
configs without it still map from `first_k_dense_replace`; HYV3Bridge's export writes
`mlp_layer_types` (it wrote only `first_k_dense_replace`, which HYV3Config ignores).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

ALTERNATING = ["dense", "sparse", "dense", "sparse"]


@pytest.fixture
def bare_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """The family bridge's own provider settings alone (the generic HF mapping stubbed)."""
    from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge

    monkeypatch.setattr(
        MegatronModelBridge, "provider_bridge", lambda _self, _hf: SimpleNamespace()
    )


def _hyv3(config: Any) -> Any:
    from megatron.bridge.models.hy_v3.hy_v3_bridge import HYV3Bridge

    return HYV3Bridge().provider_bridge(cast(Any, SimpleNamespace(config=config)))


def _glm5(config: Any) -> Any:
    from megatron.bridge.models.glm_moe_dsa.glm5_bridge import GLM5Bridge

    config.indexer_rope_interleave = (
        False  # a later field, not this patch's (Bridge's tests set it)
    )
    return GLM5Bridge().provider_bridge(cast(Any, SimpleNamespace(config=config)))


def test_hyv3_moe_layer_freq_follows_mlp_layer_types(bare_provider: None) -> None:
    from transformers import HYV3Config

    config = HYV3Config(num_hidden_layers=4, mlp_layer_types=ALTERNATING)
    assert _hyv3(config).moe_layer_freq == [0, 1, 0, 1]


def test_glm5_moe_layer_freq_follows_mlp_layer_types(bare_provider: None) -> None:
    from transformers import GlmMoeDsaConfig

    config = GlmMoeDsaConfig(num_hidden_layers=4, mlp_layer_types=ALTERNATING)
    assert _glm5(config).moe_layer_freq == [0, 1, 0, 1]


def test_hyv3_without_mlp_layer_types_maps_first_k_dense_replace(bare_provider: None) -> None:
    config = SimpleNamespace(
        num_hidden_layers=4,
        first_k_dense_replace=1,
        router_scaling_factor=2.8,
        moe_intermediate_size=32,
        num_shared_experts=1,
    )
    assert _hyv3(config).moe_layer_freq == [0, 1, 1, 1]


def test_hyv3_export_writes_mlp_layer_types() -> None:
    """Export writes the layout transformers builds from: without it HYV3Config falls back to
    one dense layer then MoE layers, whatever the trained model had."""
    from megatron.bridge.models.hy_v3.hy_v3_bridge import HYV3Bridge
    from transformers import HYV3Config

    config = HYV3Config(
        num_hidden_layers=4,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=4,
        num_experts_per_tok=2,
        vocab_size=256,
        mlp_layer_types=ALTERNATING,
    )
    provider = HYV3Bridge().provider_bridge(cast(Any, SimpleNamespace(config=config)))
    exported = HYV3Bridge.megatron_to_hf_config(provider)
    assert HYV3Config(**exported).mlp_layer_types == ALTERNATING
