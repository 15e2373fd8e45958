"""Tripwire for patches/Megatron-LM/mla-shared-prefix-positions.patch.

Multi-latent attention computes its rope table inside the attention, where the caller's position
ids do not reach, and read it by sequence index; it also took any packed_seq_params for THD.
Over shared-prefix rows a continuation after the first was rotated at its packed column, so the
worker kept every MLA model on whole rows. With the patch MLA reads each token's position in its
own sequence from the segments (`SharedPrefixParams.positions`). Checked on the model matrix's
tiny DeepSeek-V3 (MLA with q/kv LoRA, MoE with seq_aux_loss and an expert bias, a dense first
layer) built by Bridge, through the worker's logprob entry in training forwards: on by default,
logprobs, every gradient and the router metrics those of whole rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.model_checks import shared_prefix_figures


@pytest.mark.timeout(600)
def test_mla_model_shares_prefixes_exactly(world1: None, tmp_path: Path) -> None:
    figures = shared_prefix_figures(tmp_path, "DeepseekV3ForCausalLM")
    assert max(figures["logprobs"], figures["gradients"], figures["router"]) <= 1e-5, figures
