"""Tripwire for patches/Megatron-Bridge/gemma2-gemma3-local-spec-without-transformer-engine.patch.

Gemma 2's and Gemma 3's layer specs (`gemma2_layer_spec`, `gemma3_layer_spec`) name Transformer
Engine modules unconditionally (`TELayerNormColumnParallelLinear`, `TERowParallelLinearLayerNorm`,
and for Gemma 3 `TENorm` and `Gemma3TEDotProductAttention`). Without TE those are
`safe_import_from` stand-ins, and building a layer fails with `RuntimeError: generator raised
StopIteration` (megatron/core/transformer/attention.py, constructing `linear_proj`). With the
patch, without TE, the specs use megatron-core's local modules: a separate RMSNorm before the
column-parallel linears, `RowParallelLinearLayerNorm` (RowParallelLinear + post RMSNorm, same
parameter names as the TE module) and, for Gemma 3, `Gemma3DotProductAttention` (megatron-core's
`DotProductAttention` with the same per-layer sliding window as the TE class).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from typing import Any, cast

import pytest
import torch

from tests.support.model_checks import NVTE_BACKEND_VARS

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformer_engine") is not None,
    reason="Transformer Engine is installed here: the TE spec builds",
)

TINY = dict(
    hidden_size=64,
    ffn_hidden_size=128,
    num_attention_heads=4,
    num_query_groups=2,
    kv_channels=16,
    vocab_size=64,
    seq_length=16,
    bf16=False,
    params_dtype=torch.float32,
    autocast_dtype=torch.float32,
    use_cpu_initialization=True,
)


@pytest.fixture(autouse=True)
def _attention_backend_env() -> Iterator[None]:
    # finalize() sets these for the provider's attention_backend and refuses ones left over:
    # none before the test, and none left after it (a child process a later test starts would
    # inherit them and refuse its own backend).
    saved = {name: os.environ.pop(name) for name in NVTE_BACKEND_VARS if name in os.environ}
    yield
    for name in NVTE_BACKEND_VARS:
        os.environ.pop(name, None)
    os.environ.update(saved)


def build_and_run(provider: Any) -> Any:
    from mcore_grpo.worker.cpu import cpu_device

    with cpu_device("cpu"), torch.no_grad():
        provider.finalize()
        model = provider.provide_distributed_model(
            wrap_with_ddp=False, use_cpu_initialization=True
        )[0]
        model.eval()
        s = 12  # longer than the sliding window, so it masks something
        causal = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)[None, None]
        logits = model(torch.randint(0, 64, (2, s)), torch.arange(s)[None].expand(2, s), causal)
    assert logits.shape == (2, s, 64) and torch.isfinite(logits).all()
    names = {n for n, _ in model.named_parameters()}
    for name in (
        "input_layernorm.weight",
        "self_attention.linear_proj.post_layernorm.weight",
        "pre_mlp_layernorm.weight",
        "mlp.linear_fc2.post_layernorm.weight",
    ):
        assert f"decoder.layers.0.{name}" in names  # what the HF mappings (aliases) expect
    return model


def test_gemma2_builds_and_runs_without_transformer_engine(mcore_parallel: None) -> None:
    from megatron.bridge.models.gemma.gemma2_provider import Gemma2ModelProvider

    model = build_and_run(
        Gemma2ModelProvider(num_layers=2, window_size=(7, 0), query_pre_attn_scalar=16, **TINY)
    )
    windows = [layer.self_attention.core_attention.window_size for layer in model.decoder.layers]
    assert windows == [(7, 0), None]  # odd layers slide, as HF's Gemma 2


def test_gemma3_builds_and_runs_without_transformer_engine(mcore_parallel: None) -> None:
    from megatron.bridge.models.gemma.gemma3_provider import Gemma3ModelProvider

    model = build_and_run(Gemma3ModelProvider(num_layers=6, window_size=cast(Any, 8), **TINY))
    layers = model.decoder.layers
    windows = [layer.self_attention.core_attention.config.window_size for layer in layers]
    assert windows == [(7, 0)] * 5 + [None]  # interleaved_attn_pattern (5, 1)
    assert "decoder.layers.0.self_attention.q_layernorm.weight" in dict(model.named_parameters())
