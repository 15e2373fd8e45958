"""Rewards for responses that do not stop: NeMo-RL's `grpo.reward_shaping` and
`grpo.overlong_filtering`, the same math as its `apply_reward_shaping`
(nemo_rl/algorithms/reward_functions.py) and its overlong filter (grpo.py).

Why: a verifier that reads the last ``Answer:`` of a response (NeMo-RL's `dapo_math_verify`)
scores a response cut off at ``max_new_tokens`` as correct when the cut falls before it wrote
a second answer. Nothing then teaches the policy to stop after its answer, and greedy decoding
drifts into continuing with another worked example (docs/real-model.md, "Why it falls").
A response is *truncated* when it spent the token budget without sampling a stop token
(vLLM's ``finish_reason == "length"``, which NeMo-RL reads).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mcore_grpo.config.grpo import RewardShapingConfig


def truncated(responses: Sequence[Sequence[int]], stop_token_ids: Sequence[int]) -> torch.Tensor:
    """[B] bool: which responses did not end on a stop token (the budget ran out first)."""
    stops = set(stop_token_ids)
    return torch.tensor([not r or r[-1] not in stops for r in responses], dtype=torch.bool)


def shape_rewards(
    rewards: torch.Tensor,
    response_lengths: Sequence[int],
    is_truncated: torch.Tensor,
    cfg: RewardShapingConfig,
) -> torch.Tensor:
    """The shaped [B] rewards (the input when shaping is off); `rewards` is not modified."""
    if not cfg.enabled:
        return rewards
    if cfg.stop_properly_penalty_coef is not None:
        return torch.where(is_truncated, rewards * cfg.stop_properly_penalty_coef, rewards)
    assert cfg.max_response_length is not None and cfg.overlong_buffer_length is not None
    assert cfg.overlong_buffer_penalty is not None
    expected = cfg.max_response_length - cfg.overlong_buffer_length
    penalty = [
        min(-(n - expected) / cfg.overlong_buffer_length * cfg.overlong_buffer_penalty, 0)
        for n in response_lengths
    ]
    return rewards + torch.tensor(penalty, dtype=rewards.dtype)


def loss_multipliers(is_truncated: torch.Tensor, overlong_filtering: bool) -> list[float]:
    """Each sample's weight in the loss: 0 for a truncated one under NeMo-RL's
    `grpo.overlong_filtering` (it is dropped from the loss and its normalisers), else 1."""
    if not overlong_filtering:
        return [1.0] * len(is_truncated)
    return [0.0 if t else 1.0 for t in is_truncated.tolist()]
