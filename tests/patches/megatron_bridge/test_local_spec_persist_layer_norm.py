"""Llama's bridge flag `persist_layer_norm=True` through Bridge's local spec, without Apex.

Llama's bridge (`LlamaBridge.provider_bridge`, and DeepSeek's, GLM's, Kimi's, Nemotron's ...)
sets `persist_layer_norm=True`, a kernel choice of Apex's `FusedLayerNorm`. Without Apex the
local layer spec builds megatron-core's `WrappedTorchNorm`, which unpatched asserts the flag is
off, so no Llama-family checkpoint builds without Transformer Engine and Apex. This was the
tripwire of patches/Megatron-Bridge/retired/local-spec-persist-layer-norm-without-apex.patch;
patches/Megatron-LM/torch-norm-persist-layer-norm-and-zero-centered-gamma.patch now fixes it at the
root, and this test keeps the Bridge-level path covered (it fails without that patch).

The same tiny provider as the local-spec tripwire, with the flag Llama's bridge sets."""

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
