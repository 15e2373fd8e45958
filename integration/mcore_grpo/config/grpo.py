"""``grpo.*``: the algorithm's batch shape, advantages, reward shaping and held-out evaluation."""

from __future__ import annotations

from dataclasses import dataclass, field


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


# NeMo-RL's advantage estimators; this project implements GRPO's only.
ADV_ESTIMATORS = ("grpo",)


@dataclass
class AdvEstimatorSection:
    """``grpo.adv_estimator.*``: NeMo-RL's advantage estimator settings.

    NeMo-RL's GRPO estimator reads ``grpo.adv_estimator.normalize_rewards`` and
    ``grpo.adv_estimator.use_leave_one_out_baseline`` (advantage_estimator.py:66-67); its
    example configs set them to ``${grpo.normalize_rewards}`` and
    ``${grpo.use_leave_one_out_baseline}``. Here ``null`` (the default) is that
    interpolation: unset, the ``grpo.*`` value applies; set, it wins.
    """

    name: str = "grpo"
    normalize_rewards: bool | None = None
    use_leave_one_out_baseline: bool | None = None
    # Read only by NeMo-RL's Reinforce++ estimator (refused by `name`); inert for GRPO there
    # too. Accepted so NeMo-RL's example `grpo` sections load unchanged.
    minus_baseline: bool = True

    def __post_init__(self) -> None:
        if self.name not in ADV_ESTIMATORS:
            raise ValueError(
                f"grpo.adv_estimator.name={self.name!r}: only NeMo-RL's 'grpo' estimator is "
                "implemented here (gdpo needs named reward components, reinforce_plus_plus "
                "a KL-in-reward path and opd a teacher; none exists in this project)"
            )


@dataclass
class GRPOSection:
    """``grpo.*``: the algorithm's batch shape and advantage settings."""

    num_prompts_per_step: int = 8
    num_generations_per_prompt: int = 8
    max_num_steps: int = 40
    normalize_rewards: bool = True
    use_leave_one_out_baseline: bool = True
    seed: int = 42
    adv_estimator: AdvEstimatorSection = field(default_factory=AdvEstimatorSection)
    # NeMo-RL's keys for responses that spent the token budget without a stop token:
    # their reward scaled or length-penalised (`reward_shaping`), or their loss dropped
    # (`overlong_filtering`); `mcore_grpo.grpo.algorithm.reward_shaping`.
    reward_shaping: RewardShapingConfig = field(default_factory=RewardShapingConfig)
    overlong_filtering: bool = False
    # Held-out evaluation (math tasks), NeMo-RL's keys: greedy accuracy on the eval split
    # before step 1, every val_period steps (0: never) and after the last step; at most
    # max_val_samples problems, val_batch_size prompts per generate call.
    val_period: int = 0
    val_at_start: bool = False
    val_at_end: bool = False
    max_val_samples: int = 256
    val_batch_size: int = 32
    # NeMo-RL's key: no reference-policy logprob forward (true needs
    # loss_fn.reference_policy_kl_penalty 0). null: NeMo-RL's default, skipped exactly when the
    # loss has no KL term; false at KL 0 keeps the forward for the `kl` metric alone (its
    # cost: docs/grpo.md, "Metrics that explain a run").
    skip_reference_policy_logprobs_calculation: bool | None = None

    @property
    def advantage_normalize_rewards(self) -> bool:
        """What the advantage estimator uses: ``adv_estimator.*`` if set, else ``grpo.*``."""
        own = self.adv_estimator.normalize_rewards
        return self.normalize_rewards if own is None else own

    @property
    def advantage_leave_one_out(self) -> bool:
        """What the advantage estimator uses: ``adv_estimator.*`` if set, else ``grpo.*``."""
        own = self.adv_estimator.use_leave_one_out_baseline
        return self.use_leave_one_out_baseline if own is None else own
