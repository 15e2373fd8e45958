"""Tripwire for patches/Megatron-Bridge/falcon-h1-shared-prefix.patch.

Falcon-H1's own model class took no packed-sequence parameters and never passed them to its Mamba
mixers, so the worker could not give it megatron-core's shared-prefix segments and kept it on
whole rows. With the patch they reach every layer (attention and Mamba in parallel), the model
rotates by the given positions, and the SSM multipliers apply on the mixer's segment path too.
Checked on the model matrix's tiny Falcon-H1 through the worker's logprob entry: on by default,
logprobs and every gradient those of whole rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.model_checks import shared_prefix_figures


@pytest.mark.timeout(600)
def test_falcon_h1_shares_prefixes_exactly(world1: None, tmp_path: Path) -> None:
    figures = shared_prefix_figures(tmp_path, "FalconH1ForCausalLM")
    assert max(figures["logprobs"], figures["gradients"]) <= 1e-5, figures
