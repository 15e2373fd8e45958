"""Tripwire for patches/Megatron-LM/shared-prefix-softmax-offset.patch and
patches/Megatron-LM/yarn-from-position-ids.patch (each fails this test when left out).

GPT-OSS adds a learnable per-head logit to each softmax denominator (attention sinks) and rotates
by YaRN RoPE. megatron-core's local attention refused a softmax offset over shared-prefix
segments, and `rope_from_position_ids` (rotate by each token's position in its own sequence)
applied to standard RoPE only, so the worker kept GPT-OSS on whole rows. With both patches the
sinks are a zero key whose additive mask is the offset, and YaRN's table is read at the given
positions. Checked on the model matrix's tiny GPT-OSS (sinks, YaRN, a window of 8 on every other
layer under rows of up to 12 tokens, MoE) built by Bridge, through the worker's logprob entry in
training forwards: on by default, logprobs, every gradient and the router metrics those of whole
rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.model_checks import shared_prefix_figures


@pytest.mark.timeout(600)
def test_gpt_oss_shares_prefixes_exactly(world1: None, tmp_path: Path) -> None:
    figures = shared_prefix_figures(tmp_path, "GptOssForCausalLM")
    assert max(figures["logprobs"], figures["gradients"], figures["router"]) <= 1e-5, figures
