"""Tripwires for patches/Megatron-Bridge/falcon-h1-local-spec-without-transformer-engine.patch
and falcon-h1-ssm-multipliers-in-inference.patch.

Bridge's Falcon-H1 stack spec was Transformer Engine only: fused norm + linear layers, TE
attention, a `TENorm` in each parallel layer and a `TENorm` final norm built by the stack
itself. Without TE no Falcon-H1 model built (``ImportError: Transformer Engine is not
installed ... when instantiating TENorm``). With the patch the default spec without TE is a
local one: megatron-core's torch norms (the MLP's fused norm becomes a separate
``pre_mlp_layernorm``, mapped to the checkpoint's ``pre_ff_layernorm``), column/row-parallel
linears and megatron-core's attention.

Falcon-H1's five SSM multipliers were applied only on megatron-core's memory-efficient training
path: its prefill and decode methods were renamed (Megatron-LM #5382), and Bridge's overrides
of the old names are never called. Inference, and training without mamba-ssm, dropped them
(logits off by 3.6e-3 on the released variant below). With the patch every path applies them.

The oracle is `transformers` on the same checkpoint: the matrix's tiny Falcon-H1 (two
parallel Mamba-2 + attention + MLP layers), once with the config class's defaults (unit
multipliers, no gated RMSNorm in the mixer) and once as released checkpoints are (Falcon-H1's
MuP multipliers, the mixer's gated RMSNorm). Also needs the Megatron-LM patch
mamba-without-mamba-ssm (the torch SSD scan).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, cast

import pytest

from tests.support.model_checks import LOGITS_DIFFERENCE, child_figure

ARCH = "FalconH1ForCausalLM"

# Falcon-H1's released multipliers (Falcon-H1-0.5B-Instruct's config.json) and its mixer's
# gated RMSNorm (on in the larger releases and Falcon-H1R).
RELEASED: dict[str, Any] = {
    "embedding_multiplier": 5.656854249492381,
    "lm_head_multiplier": 0.0390625,
    "key_multiplier": 0.39062499999999994,
    "attention_out_multiplier": 0.9375,
    "ssm_in_multiplier": 1.25,
    "ssm_out_multiplier": 0.23570226039551587,
    "mlp_multipliers": [0.8838834764831844, 0.5859375],
    "ssm_multipliers": [0.3535533905932738, 0.25, 0.3535533905932738, 0.5, 0.3535533905932738],
    "mamba_rms_norm": True,
}

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformer_engine") is not None,
    reason="Transformer Engine is installed here: the TE spec builds",
)


def test_falcon_h1_default_spec_without_te_is_local() -> None:
    from megatron.bridge.models.falcon_h1.falconh1_provider import get_default_falconh1_stack_spec
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    layer = cast(Any, get_default_falconh1_stack_spec()).submodules.falconh1_layer.submodules
    assert layer.norm is WrappedTorchNorm and layer.pre_mlp_layernorm is WrappedTorchNorm
    assert layer.self_attention.submodules.core_attention is DotProductAttention


@pytest.mark.timeout(600)
@pytest.mark.parametrize("variant", ["defaults", "released"])
def test_falcon_h1_matches_transformers_without_te(tmp_path: Path, variant: str) -> None:
    from model_matrix import families

    checkpoint = tmp_path / "falcon_h1"
    families.write_checkpoint(checkpoint, ARCH, overrides=RELEASED if variant == "released" else {})
    diff = child_figure(LOGITS_DIFFERENCE, str(checkpoint))
    assert diff <= 1e-4, diff
