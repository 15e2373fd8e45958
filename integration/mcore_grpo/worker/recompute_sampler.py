"""The reference sampler: re-runs the whole prefix through the policy for every new token.

O(T^2) work for T new tokens, but it is the plain forward the logprob and training passes use,
so it is the ground truth the KV-cache sampler (`static_cache_sampler`) is tested against, and
the fallback where the cache cannot run (sequence parallelism).
"""

from __future__ import annotations

import torch

from mcore_grpo.worker.packed_rows import policy_logits
from mcore_grpo.worker.sampling import (
    GenerationOutput,
    Rollout,
    SamplingGenerator,
    SamplingParams,
    sample_next,
)


@torch.no_grad()
def generate_recompute(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    params: SamplingParams,
    vocab_size: int,
    generator: SamplingGenerator = None,
) -> GenerationOutput:
    """Sample up to `max_new_tokens` per row by full forwards; a row stops after a stop token."""
    rollout = Rollout(prompt_ids, prompt_mask, params)
    while True:
        n = rollout.length
        logits = policy_logits(model, rollout.ids[:, :n], rollout.mask[:, :n])[:, -1, :]
        if rollout.append(*sample_next(logits, params, vocab_size, generator)):
            return rollout.output()
