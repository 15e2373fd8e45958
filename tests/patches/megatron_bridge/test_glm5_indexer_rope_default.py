"""Tripwire for patches/Megatron-Bridge/glm5-indexer-rope-interleave-default.patch.

GLM5Bridge reads `hf_config.indexer_rope_interleave`, a field that transformers'
`GlmMoeDsaConfig` (5.8) does not define, so a config that transformers writes fails with
`AttributeError: 'GlmMoeDsaConfig' object has no attribute 'indexer_rope_interleave'`.
transformers' own indexer applies non-interleaved (NeoX-style) RoPE ("unlike the main attention
which uses interleaved RoPE", modeling_glm_moe_dsa.py), which is megatron-core's default
`dsa_indexer_rope_interleaved=False`. With the patch a config without the field maps to that;
a config that sets it keeps its value.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest


def _provider(monkeypatch: pytest.MonkeyPatch, config: Any) -> Any:
    from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge
    from megatron.bridge.models.glm_moe_dsa.glm5_bridge import GLM5Bridge

    monkeypatch.setattr(
        MegatronModelBridge, "provider_bridge", lambda _self, _hf: SimpleNamespace()
    )
    return GLM5Bridge().provider_bridge(cast(Any, SimpleNamespace(config=config)))


def test_glm5_config_without_the_field_maps_to_non_interleaved_rope(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from transformers import GlmMoeDsaConfig

    config = GlmMoeDsaConfig(num_hidden_layers=2, mlp_layer_types=["dense", "sparse"])
    assert not hasattr(config, "indexer_rope_interleave")  # the transformers config, as written
    assert _provider(monkeypatch, config).dsa_indexer_rope_interleaved is False


def test_glm5_config_with_the_field_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import GlmMoeDsaConfig

    config = GlmMoeDsaConfig(num_hidden_layers=2, mlp_layer_types=["dense", "sparse"])
    config.indexer_rope_interleave = True
    assert _provider(monkeypatch, config).dsa_indexer_rope_interleaved is True
