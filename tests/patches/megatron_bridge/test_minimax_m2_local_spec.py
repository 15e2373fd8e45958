"""Tripwire for patches/Megatron-Bridge/minimax-m2-without-transformer-engine.patch.

`minimax_m2_layer_spec` (minimax_m2_provider.py) always started from
`get_gpt_layer_with_transformer_engine_spec`; without TE megatron-core's TE spec provider is
None ("TypeError: 'NoneType' object is not callable", gpt_layer_specs.py:233). With the local
spec the routed experts are SequentialMLP (`mlp.experts.local_experts.<i>.linear_fc{1,2}`),
which MiniMaxM2Bridge did not map; and `_FullDimQKNormMapping.hf_to_megatron` broadcast on
`cuda` at TP > 1 (the matrix's TP=2 row covers that one). With the patch a tiny MiniMax-M2
checkpoint builds on CPU and its logits equal transformers'.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformer_engine") is not None,
    reason="Transformer Engine is installed here: the TE spec builds",
)


def test_minimax_m2_builds_on_local_spec_and_matches_transformers(
    gloo_world: None, tmp_path: Path
) -> None:
    from model_matrix import checks, families

    arch = "MiniMaxM2ForCausalLM"
    families.write_checkpoint(tmp_path / arch, arch)
    vocab = families.tiny_config(arch).vocab_size
    assert checks.logits_difference(tmp_path / arch, 1, 1, vocab) <= 1e-4
