"""Tripwires for patches/Megatron-LM/torch-norm-persist-layer-norm-and-zero-centered-gamma.patch.

`WrappedTorchNorm` is the norm of megatron-core's local layer spec whenever Apex is absent (always
for RMSNorm). Unpatched it asserts two config flags off that Megatron-Bridge's providers turn on:

- `persist_layer_norm`: DeepSeek, GLM, Kimi, MiniMax, Nemotron and Llama bridges set it; it only
  selects Apex's persistent kernel.
- `layernorm_zero_centered_gamma`: the Gemma family's norms scale by (1 + weight), and Bridge
  maps them to megatron-core's zero-centered gamma.

- `sequence_parallel`: the norm computes the same function on part of the sequence; its weights'
  gradients must then be summed over the tensor-parallel group (as Apex's and TE's norms are).

The oracle for the second is `transformers`' own `GemmaRMSNorm` with the same weight; for the
third, the same model at TP=1 and `transformers`' logits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support.python_process import run_ranks

HIDDEN = 16


def _config(**flags: Any) -> Any:
    from megatron.core.transformer import TransformerConfig

    return TransformerConfig(
        num_layers=1,
        hidden_size=HIDDEN,
        num_attention_heads=2,
        use_cpu_initialization=True,
        **flags,
    )


def _norm(**flags: Any) -> torch.nn.Module:
    """`WrappedTorchNorm` of `_config(**flags)`: a torch module (typed as megatron's protocol)."""
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    norm: object = WrappedTorchNorm(config=_config(**flags), hidden_size=HIDDEN, eps=1e-6)
    assert isinstance(norm, torch.nn.Module)
    return norm


@pytest.mark.parametrize("normalization", ["LayerNorm", "RMSNorm"])
def test_persist_layer_norm_builds_the_same_torch_norm(normalization: str) -> None:
    norm = _norm(persist_layer_norm=True, normalization=normalization)
    plain = _norm(normalization=normalization)
    x = torch.randn(3, HIDDEN, generator=torch.Generator().manual_seed(0))
    assert torch.equal(norm(x), plain(x))


@pytest.mark.parametrize("normalization", ["LayerNorm", "RMSNorm"])
def test_zero_centered_gamma_starts_as_the_identity_scale(normalization: str) -> None:
    norm = _norm(layernorm_zero_centered_gamma=True, normalization=normalization)
    plain = _norm(normalization=normalization)
    assert torch.count_nonzero(norm.get_parameter("weight")) == 0  # gamma - 1 is stored
    x = torch.randn(3, HIDDEN, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(norm(x), plain(x), rtol=0, atol=1e-6)


def test_zero_centered_rms_norm_equals_gemmas() -> None:
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    norm = _norm(layernorm_zero_centered_gamma=True, normalization="RMSNorm")
    gemma = GemmaRMSNorm(HIDDEN, eps=1e-6)
    weight = 0.3 * torch.randn(HIDDEN, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        norm.get_parameter("weight").copy_(weight)
        gemma.weight.copy_(weight)
    x = torch.randn(3, HIDDEN, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(norm(x), gemma(x), rtol=0, atol=1e-6)


# Each rank: `python -c` forked warm (tests/support/python_process.py); argv PORT RANK ...
SP_WORKER = """
import sys
from tests.patches.megatron_lm._torch_norm_sp_worker import main
main(int(sys.argv[2]), 2, int(sys.argv[1]), sys.argv[3], sys.argv[4])
"""


@pytest.mark.timeout(900)
def test_sequence_parallel_norm_grads_match_tp1(tmp_path: Path) -> None:
    """Sequence parallelism with the torch norm: unpatched, `WrappedTorchNorm` asserts it off
    ("sequence parallel not supported by torch LayerNorm"). Each TP rank then norms half the
    sequence, so the norm weights' gradients must be summed over the TP group, which
    finalize_model_grads does for weights marked `sequence_parallel`. A tiny Llama at TP=2 with
    sequence parallelism: logits within 1e-4 of transformers', norm gradients those of TP=1."""
    from model_matrix import families

    checkpoint = tmp_path / "llama"
    families.write_checkpoint(checkpoint, "LlamaForCausalLM")
    result = tmp_path / "result.pt"
    run_ranks(SP_WORKER, 2, str(checkpoint), str(result))
    out = torch.load(result)
    assert out["tp1"] <= 1e-4 and out["tp2"] <= 1e-4, out
    assert out["smallest"] > 1e-3, out  # every norm has a gradient to compare
    assert out["norm_grad"] <= 1e-5, out
