"""Tripwire for patches/Megatron-Bridge/gemma3-rope-at-positions.patch.

Gemma 3 keeps two rope tables (local layers base 10,000, global layers base 1,000,000) in its own
`Gemma3RotaryEmbedding`, which inherited `get_emb_at_positions` from megatron-core's
RotaryEmbedding: rotating by the given positions (rope-from-position-ids.patch, which shared-prefix
rows need) returned the global table alone and Gemma 3's attention refused it, so the worker kept
Gemma 3 on whole rows. With the patch both tables are read at the positions. Checked on the model
matrix's tiny Gemma 3 (a sliding layer with a window of 8 under rows of up to 12 tokens, then a
global layer) through the worker's logprob entry: on by default, logprobs and every gradient those
of whole rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.model_checks import shared_prefix_figures


@pytest.mark.timeout(600)
def test_gemma3_shares_prefixes_exactly(world1: None, tmp_path: Path) -> None:
    figures = shared_prefix_figures(tmp_path, "Gemma3ForCausalLM")
    assert max(figures["logprobs"], figures["gradients"]) <= 1e-5, figures
