"""Tripwire for patches/Megatron-Bridge/mla-latent-layernorm-epsilon.patch.

transformers builds every MLA model's query and key-value latent norms (q_a_layernorm,
kv_a_layernorm) with eps 1e-6, whatever the checkpoint's rms_norm_eps; megatron-core used
rms_norm_eps. GLM-4.7-Flash and GLM-5 set it to 1e-5: the model matrix's tiny GLM-4.7-Flash
was 5.7e-05 off transformers' logits. With the patch Bridge's MLA provider sets megatron-core's
`latent_layernorm_epsilon` (Megatron-LM mla-latent-layernorm-epsilon.patch) to 1e-6. Here the
checkpoint's rms_norm_eps is 1e-2, so the wrong epsilon is far outside the tolerance.
"""

from __future__ import annotations

from pathlib import Path


def test_glm47_flash_latent_norms_match_transformers(gloo_world: None, tmp_path: Path) -> None:
    from model_matrix import checks, families

    checkpoint = tmp_path / "glm47-flash"
    families.write_checkpoint(
        checkpoint, "Glm4MoeLiteForCausalLM", overrides={"rms_norm_eps": 1e-2}
    )
    vocab = families.TINY_SIZES["vocab_size"]
    assert checks.logits_difference(checkpoint, 1, 1, vocab) <= 1e-4
