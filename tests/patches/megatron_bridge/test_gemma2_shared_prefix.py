"""Tripwire for patches/Megatron-Bridge/gemma2-shared-prefix.patch and
patches/Megatron-LM/shared-prefix-score-transform.patch (each fails this test when left out).

Gemma 2 soft-caps its attention scores (`cap * tanh(score / cap)`) in attention classes of its
own, which refused megatron-core's shared-prefix segments; megatron-core's segment attention runs
on SDPA, which takes no such transform. So the worker kept Gemma 2 on whole rows. With both
patches Gemma 2's attention calls the segment attention with its scale, its window and the cap as
a score transform. Checked on the model matrix's tiny Gemma 2 (a sliding layer with a window of 8
under rows of up to 12 tokens, then a global layer) through the worker's logprob entry: on by
default, logprobs and every gradient those of whole rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.model_checks import shared_prefix_figures


@pytest.mark.timeout(600)
def test_gemma2_shares_prefixes_exactly(world1: None, tmp_path: Path) -> None:
    figures = shared_prefix_figures(tmp_path, "Gemma2ForCausalLM")
    assert max(figures["logprobs"], figures["gradients"]) <= 1e-5, figures
