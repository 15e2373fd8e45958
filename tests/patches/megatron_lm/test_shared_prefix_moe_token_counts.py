"""Tripwire for patches/Megatron-LM/shared-prefix-moe-token-counts.patch.

Shared-prefix rows forward a GRPO group's prompt once for its G samples. An MoE router's
load-balancing and z losses (and the expert bias's counts) average over the routed tokens, so
without token counts a prompt token counted once instead of G times: the losses, their
gradients and the tokens per expert differed from whole rows', and the worker kept every MoE
model with an auxiliary loss on whole rows. With the patch each token counts for the samples
it stands for (`SharedPrefixParams.token_counts`). Checked on the model matrix's tiny
Qwen3-MoE (top-2 of 4 experts, `router_aux_loss_coef` 0.001) built by Bridge, through the
worker's logprob entry in training forwards: on by default, logprobs, every gradient and the
router metrics those of whole rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.model_checks import shared_prefix_figures


@pytest.mark.timeout(600)
def test_moe_auxiliary_loss_model_shares_prefixes_exactly(world1: None, tmp_path: Path) -> None:
    figures = shared_prefix_figures(tmp_path, "Qwen3MoeForCausalLM")
    assert max(figures["logprobs"], figures["gradients"], figures["router"]) <= 1e-5, figures
