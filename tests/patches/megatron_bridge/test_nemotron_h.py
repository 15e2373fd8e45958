"""Tripwires for patches/Megatron-Bridge/hybrid-local-spec-without-transformer-engine.patch and
nemotron-h-embedding-name-saved-by-transformers.patch.

NemotronH (Mamba-2, attention, MLP and MoE layers) through Bridge without Transformer Engine:
- `get_default_hybrid_stack_spec` returned megatron-core's TE hybrid spec whether TE was
  installed or not; without TE its modules are stand-ins, and the provider could not even be
  sent to the ranks (``TypeError: cannot pickle 'cell' object``). With the patch the default
  is megatron-core's local hybrid spec (as the GPT provider's default layer spec falls back).
- transformers (>= 5, which Bridge requires) writes NemotronH's token embedding as
  "backbone.embedding.weight" (its conversion mapping renames that name on load; releases use
  "backbone.embeddings.weight"). Bridge mapped only the release name: importing a checkpoint
  saved by transformers left the embedding at its initial value with one warning line, and
  exporting it failed ("33 tensors from the original checkpoint were not written").

The oracle is `transformers` on the same checkpoint (the matrix's tiny NemotronH: a Mamba-2,
an MoE with a shared expert, an attention and an MLP layer), also needing the Megatron-LM
patches mamba-without-mamba-ssm and hybrid-stack-local-spec-without-te.
"""

from __future__ import annotations

import importlib.util
import pickle
from pathlib import Path
from typing import Any, cast

import pytest

from tests.support.model_checks import LOGITS_DIFFERENCE, child_figure

ARCH = "NemotronHForCausalLM"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformer_engine") is not None,
    reason="Transformer Engine is installed here: the TE spec builds",
)


def _checkpoint(tmp_path: Path) -> Path:
    from model_matrix import families
    from safetensors import safe_open

    checkpoint = tmp_path / "nemotron_h"
    families.write_checkpoint(checkpoint, ARCH)
    with safe_open(str(checkpoint / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    # What this checkpoint tests: the name transformers' save_pretrained writes.
    assert "backbone.embedding.weight" in names and "backbone.embeddings.weight" not in names
    return checkpoint


def test_hybrid_provider_without_te_uses_the_local_spec_and_pickles() -> None:
    from megatron.bridge.models.hybrid.hybrid_provider import (
        HybridModelProvider,
        get_default_hybrid_stack_spec,
    )
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    provider = HybridModelProvider(num_layers=2, hidden_size=64, num_attention_heads=4)
    spec = cast(Any, get_default_hybrid_stack_spec(provider))
    attention = spec.submodules.attention_layer.submodules.self_attention.submodules
    assert attention.core_attention is DotProductAttention
    pickle.dumps(provider)  # the worker sends the provider to its ranks


@pytest.mark.timeout(600)
def test_nemotron_h_checkpoint_saved_by_transformers_matches_transformers(tmp_path: Path) -> None:
    diff = child_figure(LOGITS_DIFFERENCE, str(_checkpoint(tmp_path)))
    assert diff <= 1e-4, diff
