"""Tripwire for patches/Megatron-Bridge/gemma2-flex-attention-cpu-backward.patch.

Gemma 2's attention (`Gemma2FlexDotProductAttention`) takes torch's FlexAttention whenever no
attention mask is given, and FlexAttention has no backward on CPU. The worker forwards rows
packed as their real tokens without a mask, so a GRPO step on a Gemma 2 model on CPU failed:
`NotImplementedError: FlexAttention does not support backward on CPU` (gemma2_provider.py).
With the patch, a CPU forward that will be differentiated takes the unfused path: the model
matrix's GRPO step (one `MegatronPolicyWorker.train` with the GRPO loss) runs, its loss finite
and the weights moved.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest


@pytest.mark.cpu_only(reason="FlexAttention's missing backward is a CPU matter")
def test_a_gemma2_grpo_step_trains_on_cpu(world1: None, tmp_path: Path) -> None:
    from model_matrix import checks, families

    checkpoint = tmp_path / "gemma2"
    families.write_checkpoint(checkpoint, "Gemma2ForCausalLM")
    step = checks.grpo_step(checkpoint, 1, 1, families.TINY_SIZES["vocab_size"])
    assert math.isfinite(step["loss"]) and step["max_weight_change"] > 0, step
