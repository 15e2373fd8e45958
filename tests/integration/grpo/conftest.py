"""Shared shortened CPU-preset settings for the GRPO end-to-end tests."""

from __future__ import annotations

# cpu-tiny shortened: 3 steps of 4 prompts x 4 samples, 2 optimizer steps per GRPO step.
SHORT = [
    "grpo.max_num_steps=3",
    "grpo.num_prompts_per_step=4",
    "grpo.num_generations_per_prompt=4",
    "policy.train_global_batch_size=8",
    "policy.train_micro_batch_size=4",
    "policy.logprob_batch_size=8",
]

import pytest  # noqa: E402


@pytest.fixture
def short() -> list[str]:
    """The shortened CPU-preset overrides (a fresh list per test)."""
    return list(SHORT)
