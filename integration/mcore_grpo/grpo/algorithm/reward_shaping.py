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
from dataclasses import dataclass

import torch


@dataclass
class RewardShapingConfig:
    """``grpo.reward_shaping.*``, NeMo-RL's `RewardShapingConfig` keys and defaults.

    With `stop_properly_penalty_coef` set, a truncated response's reward is multiplied by it
    (0: no reward for a response that did not stop) and the DAPO keys are ignored; otherwise
    DAPO's overlong penalty: ``min(-(length - (max_response_length - overlong_buffer_length))
    / overlong_buffer_length * overlong_buffer_penalty, 0)`` is added to every reward.
    """

    enabled: bool = False
    overlong_buffer_length: int | None = None
    overlong_buffer_penalty: float | None = None
    max_response_length: int | None = None
    stop_properly_penalty_coef: float | None = None

    def __post_init__(self) -> None:
        coef = self.stop_properly_penalty_coef
        if coef is not None and not 0 <= coef <= 1:
            raise ValueError(
                f"grpo.reward_shaping.stop_properly_penalty_coef={coef}: must be in [0, 1] "
                "(0: a truncated response scores 0; 1: no penalty)"
            )
        if not self.enabled or coef is not None:
            return
        dapo = {
            "overlong_buffer_length": self.overlong_buffer_length,
            "overlong_buffer_penalty": self.overlong_buffer_penalty,
            "max_response_length": self.max_response_length,
        }
        missing = [k for k, v in dapo.items() if v is None]
        if missing:
            raise ValueError(
                "grpo.reward_shaping.enabled=true needs stop_properly_penalty_coef, or DAPO's "
                f"overlong penalty: set grpo.reward_shaping.{missing[0]} "
                f"(unset: {', '.join(missing)})"
            )
        if self.overlong_buffer_penalty is not None and self.overlong_buffer_penalty < 0:
            raise ValueError(
                f"grpo.reward_shaping.overlong_buffer_penalty={self.overlong_buffer_penalty}: "
                "must be >= 0"
            )
        if self.overlong_buffer_length is not None and self.overlong_buffer_length <= 0:
            raise ValueError(
                f"grpo.reward_shaping.overlong_buffer_length={self.overlong_buffer_length}: "
                "must be > 0 (it divides the excess length)"
            )


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
