"""Tripwire for patches/Megatron-Bridge/exaone4-local-spec-without-transformer-engine.patch and
exaone4-untied-output-and-hybrid-attention.patch.

Exaone4Bridge's layer spec (`exaone4_layer_spec`) is Transformer Engine only: TE linears, TE
post-norm linears, and no q/k norm in the spec, so megatron-core falls back to TENorm and,
without TE, refuses the layer ("qk_layernorm requires Transformer Engine (for TENorm) or
q_layernorm/k_layernorm set in the spec"). With the patch the spec uses megatron-core's local
modules there (`RowParallelLinearLayerNorm`, the local twin of `TERowParallelLinearLayerNorm`).
The bridge also maps `lm_head` (untied checkpoints, `tie_word_embeddings=false`, the class
default and EXAONE-4.0-32B's) and the hybrid attention of the config (`layer_types` +
`sliding_window`: sliding layers with RoPE, global layers without), so a checkpoint built from
`Exaone4Config`'s defaults matches transformers.
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
    reason="Transformer Engine is installed here: the TE spec builds",
)


def test_exaone4_layer_builds_without_transformer_engine(mcore_device: str) -> None:
    from megatron.bridge.models.exaone.exaone4.exaone4_bridge import Exaone4Bridge
    from megatron.bridge.models.exaone.exaone4.exaone4_provider import exaone4_layer_spec
    from megatron.bridge.models.gpt_provider import GPTModelProvider
    from megatron.core.transformer.spec_utils import build_module

    provider = GPTModelProvider(
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_query_groups=2,
        ffn_hidden_size=128,
        qk_layernorm=True,
        normalization="RMSNorm",
        add_bias_linear=False,
        gated_linear_unit=True,
        use_cpu_initialization=True,
    )
    provider.finalize()
    layer = cast(Any, build_module(exaone4_layer_spec(provider), config=provider, layer_number=1))
    out, _ = layer(torch.randn(6, 1, 64), attention_mask=None)
    assert out.shape == (6, 1, 64)

    names = [f"decoder.layers.0.{n}" for n, _ in layer.named_parameters()]
    for norm in (
        "q_layernorm",
        "k_layernorm",
        "linear_proj.post_layernorm",
        "linear_fc2.post_layernorm",
    ):
        assert any(f".{norm}.weight" in n for n in names), (norm, names)
    registry = Exaone4Bridge().mapping_registry()
    unmapped = [n for n in names if registry.megatron_to_hf_lookup(n) is None]
    assert not unmapped, unmapped


@pytest.mark.timeout(600)
def test_exaone4_default_config_checkpoint_matches_transformers(tmp_path: Path) -> None:
    from model_matrix import families

    checkpoint = tmp_path / "exaone4"
    families.write_checkpoint(checkpoint, "Exaone4ForCausalLM")
    config = families.tiny_config("Exaone4ForCausalLM")
    # What makes this checkpoint hard: untied, one sliding (RoPE) and one global (NoPE) layer,
    # a window shorter than the compared sequence.
    assert not config.tie_word_embeddings
    assert config.layer_types == ["sliding_attention", "full_attention"]
    assert config.sliding_window < 12
    diff = child_figure(LOGITS_DIFFERENCE, str(checkpoint))
    assert diff <= 1e-4, diff
