"""Tripwire for patches/Megatron-LM/mamba-shared-prefix-state.patch.

A Mamba-2 mixer carries a convolution and an SSM state along the row: over a row that packs a
prompt once for several completions, the second completion would start from the end of the
first, and megatron-core refused packed parameters on the mixer's CPU path, so the worker kept
hybrid models on whole rows. With the patch each segment starts from its prefix's final state
(the prefix's gradient the sum over the group). Checked on the model matrix's tiny NemotronH
(Mamba, attention and MoE layers, no position embedding) built by Bridge, through the worker's
logprob entry in training forwards: on by default, logprobs, every gradient and the router
metrics those of whole rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.model_checks import shared_prefix_figures


@pytest.mark.timeout(600)
def test_nemotron_h_shares_prefixes_exactly(world1: None, tmp_path: Path) -> None:
    figures = shared_prefix_figures(tmp_path, "NemotronHForCausalLM")
    assert max(figures["logprobs"], figures["gradients"], figures["router"]) <= 1e-5, figures
