"""The KV-cache prefill by segments on a sliding-window model (`static_cache_sampler`).

Its own module: it builds a Bridge model with its own parallel state, which the module-scoped
model of test_shared_prefill.py must not see. The oracle is the masked prefill (megatron-core's
own window over the cache's columns).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mcore_grpo.worker.sampling import SamplingParams
from mcore_grpo.worker.static_cache_sampler import generate_static_cache

from tests.integration.worker.harness import assert_same_generation as _assert_same
from tests.integration.worker.harness import prompts, seeded


def test_a_sliding_window_prefill_by_segments_samples_as_the_masked_prefill(
    world1: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mistral (every layer windowed, window 3 inside the prompts of up to 7 tokens): the
    prefill by segments counts the window in positions from each prompt's first real token,
    as the masked prefill counts it in cache columns; the same tokens and logprobs."""
    import mcore_grpo.worker.static_cache_sampler as sampler
    from model_matrix import checks, families

    vocab = families.TINY_SIZES["vocab_size"]
    families.write_checkpoint(
        tmp_path / "mistral", "MistralForCausalLM", overrides={"sliding_window": 3}
    )
    ids, mask = prompts(rows=3, length=7, seed=4, vocab=vocab)
    ids, mask = ids[torch.arange(6) % 3], mask[torch.arange(6) % 3]
    params = SamplingParams(temperature=1.0, max_new_tokens=12)
    with checks.imported_model(tmp_path / "mistral", 1, 1, vocab) as (_, gpt):
        assert sampler.prefill_segments_reason(gpt) is None
        by_segments = generate_static_cache(gpt, ids, mask, params, vocab, seeded(7))
        monkeypatch.setattr(sampler, "prefill_segments_reason", lambda _model: "forced")
        masked = generate_static_cache(gpt, ids, mask, params, vocab, seeded(7))
    _assert_same(by_segments, masked, 1.0)
