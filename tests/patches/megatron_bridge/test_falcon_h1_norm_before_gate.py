"""Tripwire for patches/Megatron-Bridge/falcon-h1-norm-before-gate-only-with-gated-norm.patch.

`mamba_norm_before_gate` orders the gated RMSNorm of Falcon-H1's Mamba mixer, which exists only
with `mamba_rms_norm`; `FalconH1Config`'s defaults are `mamba_rms_norm=False` with
`mamba_norm_before_gate=True`, a field `transformers` then never reads. Bridge copied it anyway,
and megatron-core's `MambaMixer` asserts `not norm_before_gate` whatever its `rmsnorm`, so a
checkpoint whose config leaves the field at its default did not build (with or without
Transformer Engine): `AssertionError` in `MambaMixer.__init__`. The released checkpoints set it
false, so they built; the model matrix's tiny Falcon-H1 had to override it. With the patch the
bridge drops the field where the mixer has no gated norm.

The oracle is `transformers` on the same checkpoint (the config class's defaults, resized).
Also needs the Megatron-LM patches that build Falcon-H1 without Transformer Engine and
mamba-ssm (the local spec, the torch SSD scan).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.model_checks import LOGITS_DIFFERENCE, child_figure

ARCH = "FalconH1ForCausalLM"


@pytest.mark.timeout(600)
def test_falcon_h1_at_the_config_defaults_builds_and_matches_transformers(tmp_path: Path) -> None:
    from model_matrix import families

    checkpoint = tmp_path / "falcon_h1"
    families.write_checkpoint(
        checkpoint, ARCH, overrides={"mamba_rms_norm": False, "mamba_norm_before_gate": True}
    )
    diff = child_figure(LOGITS_DIFFERENCE, str(checkpoint))
    assert diff <= 1e-4, diff
