"""Tripwire for patches/Megatron-Bridge/gemma-rope-at-positions.patch.

Gemma 3 and Gemma 4 keep two rope tables (sliding layers base 10,000, full layers base 1,000,000;
Gemma 4's full table partial) in rotary classes of their own. Gemma 3's inherited
`get_emb_at_positions` from megatron-core's RotaryEmbedding and Gemma 4 dense's had none, so
rotating by the given positions (rope-from-position-ids.patch, which shared-prefix rows need)
returned the global table alone or failed, and the worker kept both on whole rows. With the patch
both tables are read at the positions. Checked on the model matrix's tiny checkpoints (a sliding
layer with a window of 8 under rows of up to 12 tokens, then a full layer; Gemma 4 with its
per-layer inputs and softmax scale 1) through the worker's logprob entry: on by default,
logprobs and every gradient those of whole rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.model_checks import shared_prefix_figures


@pytest.mark.timeout(600)
def test_gemma3_shares_prefixes_exactly(world1: None, tmp_path: Path) -> None:
    figures = shared_prefix_figures(tmp_path, "Gemma3ForCausalLM")
    assert max(figures["logprobs"], figures["gradients"]) <= 1e-5, figures


@pytest.mark.timeout(600)
def test_gemma4_shares_prefixes_exactly(world1: None, tmp_path: Path) -> None:
    figures = shared_prefix_figures(tmp_path, "Gemma4ForCausalLM")
    assert max(figures["logprobs"], figures["gradients"]) <= 1e-5, figures
