"""Tripwire for patches/Megatron-Bridge/gemma3-layer-types-from-checkpoint.patch.

Gemma3ModelBridge never read the checkpoint's `layer_types`: every converted Gemma 3 used the
provider's default `interleaved_attn_pattern` (5, 1), five sliding-window layers then one
global. Released checkpoints follow that pattern; any other does not convert correctly: a
global layer of the checkpoint becomes a sliding one (or the reverse) and the logits differ from
transformers' as soon as the sequence is longer than the window. Export never wrote
`layer_types` either. The model matrix's tiny Gemma 3 (one sliding, one full layer, a window of
8 over 12 tokens) shows it: with the patch its logits match transformers'.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.model_checks import LOGITS_DIFFERENCE, child_figure


@pytest.mark.timeout(600)
def test_gemma3_checkpoint_with_a_full_second_layer_matches_transformers(tmp_path: Path) -> None:
    from model_matrix import families

    checkpoint = tmp_path / "gemma3"
    families.write_checkpoint(checkpoint, "Gemma3ForCausalLM")
    config = families.tiny_config("Gemma3ForCausalLM")
    # Layer 2 is global in the checkpoint, sliding in the (5, 1) default; the window is
    # shorter than the 12 compared tokens, so the two differ.
    assert config.layer_types == ["sliding_attention", "full_attention"]
    assert config.sliding_window < 12
    diff = child_figure(LOGITS_DIFFERENCE, str(checkpoint))
    assert diff <= 1e-4, f"max |megatron - transformers| logits = {diff}"
