"""Group-normalised GRPO advantages, the same math as NeMo-RL's `GRPOAdvantageEstimator`.

NeMo-RL (nemo_rl/algorithms/advantage_estimator.py, nemo_rl/algorithms/utils.py
`calculate_baseline_and_std_per_prompt`) computes, for each prompt's group of samples, a
baseline (the mean reward of the group, or of the *other* samples with the leave-one-out
baseline) and a standard deviation of the same samples (Bessel-corrected), then
``advantage = (reward - baseline) / (std + 1e-6)`` where ``std > 0`` (a group whose rewards
do not vary is left unsharpened: its advantage is ``reward - baseline``). Keeping the exact
formula means a run here and a NeMo-RL run see the same learning signal.
"""

from __future__ import annotations

import torch

_EPSILON = 1e-6


def baseline_and_std(
    rewards: torch.Tensor, group_ids: torch.Tensor, *, leave_one_out: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample baseline and std of its group (`rewards`, `group_ids`: shape [B]).

    With `leave_one_out`, sample i's statistics are over the other samples of its group
    (RLOO, https://arxiv.org/abs/2402.14740). A group with at most one sample gets
    ``baseline = reward`` so it contributes no gradient (NeMo-RL does the same).
    """
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_ids must both have shape [B]; got {tuple(rewards.shape)} and "
            f"{tuple(group_ids.shape)}"
        )
    rewards = rewards.to(torch.float64)
    baseline = torch.zeros_like(rewards)
    std = torch.zeros_like(rewards)
    for group in torch.unique(group_ids):
        idx = torch.nonzero(group_ids == group, as_tuple=True)[0]
        n = len(idx)
        if n <= 1:
            baseline[idx] = rewards[idx]
            continue
        weights = torch.ones(n, n, dtype=rewards.dtype)
        if leave_one_out:
            weights -= torch.eye(n, dtype=rewards.dtype)
        num = n - int(leave_one_out)
        group_rewards = rewards[idx]
        mean = weights @ group_rewards / num
        mean_sq = weights @ group_rewards.square() / num
        baseline[idx] = mean
        if num > 1:  # Bessel-corrected over the `num` samples used; one sample has no std.
            std[idx] = ((mean_sq - mean.square()) * (num / (num - 1))).clamp(min=0).sqrt()
    return baseline, std


def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    leave_one_out: bool = True,
    normalize: bool = True,
) -> torch.Tensor:
    """GRPO advantages, one per sample (shape [B], the dtype of `rewards`; computed in float64).

    `normalize` divides by the group's std where it is non-zero; `leave_one_out` uses the
    leave-one-out baseline. The run config's ``grpo.adv_estimator.normalize_rewards`` and
    ``grpo.adv_estimator.use_leave_one_out_baseline`` (NeMo-RL's keys) choose them.
    """
    baseline, std = baseline_and_std(rewards, group_ids, leave_one_out=leave_one_out)
    advantages = rewards.to(torch.float64) - baseline
    if normalize:
        nonzero = std > 0
        advantages[nonzero] = advantages[nonzero] / (std[nonzero] + _EPSILON)
    return advantages.to(rewards.dtype if rewards.is_floating_point() else torch.float32)
