"""Tripwire for patches/Megatron-LM/gdn-shared-prefix-state.patch.

A gated delta net layer carries a convolution window and a recurrent state along the row: over a
row that packs a prompt once for several completions, the second completion would start from the
end of the first, so the worker kept Qwen3-Next and Qwen3.5 on whole rows. With the patch each
segment starts from its prefix's final state (the prefix's gradient the sum over the group).
Checked on the model matrix's tiny Qwen3.5 (gated delta net and gated attention layers) built by
Bridge, through the worker's logprob entry: on by default, logprobs and every gradient those of
whole rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.model_checks import shared_prefix_figures


@pytest.mark.timeout(600)
def test_qwen3_5_shares_prefixes_exactly(world1: None, tmp_path: Path) -> None:
    figures = shared_prefix_figures(tmp_path, "Qwen3_5ForCausalLM")
    assert max(figures["logprobs"], figures["gradients"]) <= 1e-5, figures
