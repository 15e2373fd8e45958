"""Generation on a model with gated delta net layers (Qwen3.5 through Bridge, on the patched
megatron-core): the static cache is not offered, because megatron-core's `GatedDeltaNet` keeps no
inference state (its forward raises NotImplementedError with an inference context), so the
default backend falls back to recompute, saying why. The oracle is `transformers`: its greedy
`generate` on the same checkpoint, which carries the layers' conv and recurrent state from
token to token, gives the same tokens.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mcore_grpo.models import checks, families
from mcore_grpo.worker.generation import RECOMPUTE, generate, resolve_backend
from mcore_grpo.worker.sampling import SamplingParams

ARCH = "Qwen3_5ForCausalLM"
NEW_TOKENS = 6

pytestmark = pytest.mark.cpu_only(reason="builds the tiny checkpoint on the CPU worker path")


def test_greedy_tokens_equal_transformers_generate(tmp_path: Path, world1: None) -> None:
    from transformers import AutoModelForCausalLM

    checkpoint = tmp_path / ARCH
    families.write_checkpoint(checkpoint, ARCH)
    vocab = AutoModelForCausalLM.from_pretrained(checkpoint).config.vocab_size
    prompts = checks.tokens(vocab)  # 2 x 12 ids
    params = SamplingParams(max_new_tokens=NEW_TOKENS, greedy=True)

    with checks.imported_model(checkpoint, tp=1, ep=1, vocab=vocab) as (_, gpt):
        backend, why = resolve_backend(gpt, params)
        out = generate(gpt, prompts, torch.ones_like(prompts), params, vocab)

    assert backend == RECOMPUTE and "gated delta net" in why, why
    hf = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    expected = hf.generate(
        prompts, max_new_tokens=NEW_TOKENS, do_sample=False, min_new_tokens=NEW_TOKENS
    )
    assert torch.equal(out.output_ids.cpu(), expected)
