"""Tripwire for patches/Megatron-Bridge/local-spec-persist-layer-norm-without-apex.patch.

Llama's bridge (`LlamaBridge.provider_bridge`, and DeepSeek's, GLM's, Kimi's, Nemotron's ...)
sets `persist_layer_norm=True`, a kernel choice of Apex's `FusedLayerNorm`. Without Apex the
local layer spec builds megatron-core's `WrappedTorchNorm`, which asserts the flag is off
(`torch_norm.py`: "persist_layer_norm not supported by torch LayerNorm"), so no Llama-family
checkpoint builds without Transformer Engine and Apex. With the patch, `local_layer_spec`
clears the flag where Apex is absent (it selects a kernel, not the math) and the model builds.

The same tiny provider as the local-spec tripwire, with the flag Llama's bridge sets.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.patches.megatron_bridge.test_default_layer_spec_without_te import (
    build_and_run_provider,
)
from tests.patches.megatron_bridge.test_default_layer_spec_without_te import (
    pytestmark as local_spec_marks,
)

pytestmark = [
    *local_spec_marks,
    pytest.mark.skipif(
        importlib.util.find_spec("apex") is not None,
        reason="Apex is installed here: its FusedLayerNorm runs the persistent kernel",
    ),
]


@pytest.mark.timeout(600)
def test_llama_style_provider_with_persist_layer_norm_builds_without_apex() -> None:
    build_and_run_provider("persist_layer_norm=True,")
