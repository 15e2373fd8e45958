"""Tripwire for patches/Megatron-Bridge/gpt-provider-local-spec-without-transformer-engine.patch.

`GPTModelProvider`'s default `transformer_layer_spec`, `default_layer_spec`, says it picks
"the most appropriate layer specification based on availability" but at the pin always returns
the Transformer Engine spec, so without TE every model a bridge provides fails to build (the
TE spec's modules cannot be constructed). With the patch it falls back to the local spec
(megatron-core's own `get_gpt_layer_local_spec`) when `HAVE_TE` is false, and the model builds
and runs; with TE installed nothing changes.

In a subprocess (Bridge imported from nothing, from the tree under test), on the CPU with
`mcore_grpo.worker.cpu`'s redirects, as this project's worker runs megatron-core.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.support.ports import free_port
from tests.support.upstream_tree import upstream_tree

BRIDGE_SRC = upstream_tree("Megatron-Bridge") / "src"

pytestmark = [
    pytest.mark.skipif(
        not (BRIDGE_SRC / "megatron/bridge/__init__.py").is_file(),
        reason=f"{BRIDGE_SRC} holds no megatron.bridge: run tools/apply_patches.sh",
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("transformer_engine") is not None,
        reason="Transformer Engine is installed here: the TE spec is the right default",
    ),
]

# `{provider_kwargs}`: extra `GPTModelProvider` fields a test adds to the tiny model.
SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
import torch
import torch.distributed as dist
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[2]}", rank=0, world_size=1)
from megatron.core import parallel_state
parallel_state.initialize_model_parallel(1, 1)
from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
model_parallel_seed(0, "cpu")
from megatron.bridge.models.gpt_provider import GPTModelProvider
with cpu_device("cpu"):
    provider = GPTModelProvider(
        num_layers=1, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4, vocab_size=64,
        seq_length=16, normalization="RMSNorm", params_dtype=torch.float32,
        use_cpu_initialization=True, {provider_kwargs}
    )
    provider.finalize()
    model = provider.provide_distributed_model(wrap_with_ddp=False, use_cpu_initialization=True)[0]
    logits = model(torch.randint(0, 64, (1, 8)), torch.arange(8)[None], None)
print("logits", tuple(logits.shape))
"""


def build_and_run_provider(provider_kwargs: str = "") -> None:
    """A tiny `GPTModelProvider` (plus `provider_kwargs`, Python keyword text) built by Bridge
    from the tree under test and run once, in a fresh interpreter; fails with its stderr."""
    script = SCRIPT.replace("{provider_kwargs}", provider_kwargs)
    proc = subprocess.run(
        [sys.executable, "-c", script, str(BRIDGE_SRC), str(free_port())],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "logits (1, 8, 64)" in proc.stdout


@pytest.mark.timeout(600)
def test_provider_builds_and_runs_a_model_without_transformer_engine() -> None:
    build_and_run_provider()
