"""The learning-rate and weight-decay schedule: megatron-core's `OptimizerParamScheduler`,
counted in GRPO steps as NeMo-RL counts it.

NeMo-RL builds the scheduler through Megatron-Bridge with every length in samples
(``lr_warmup_iters * train_global_batch_size``, ...) and steps it by
``train_global_batch_size`` once per `train()` call, i.e. once per GRPO step however many
optimizer steps that call makes (megatron_policy_worker.py: "one tick == one train() call").
Counting in GRPO steps with an increment of 1 gives the same learning rate at every step.

The schedule is set from the step number (`LRSchedule.at`), not advanced by a call per step:
a resumed run gets the rate of its step with no scheduler state in the checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DECAY_STYLES = ("constant", "linear", "cosine", "inverse-square-root")
WD_INCR_STYLES = ("constant", "linear", "cosine")


@dataclass(frozen=True)
class LRSchedule:
    """Lengths in GRPO steps; the names of `OptimizerParamScheduler`'s arguments."""

    init_lr: float = 0.0  # the rate before the warm-up's first step
    min_lr: float = 0.0
    warmup_steps: int = 0
    decay_steps: int = 1
    decay_style: str = "constant"
    start_wd: float = 0.0
    end_wd: float = 0.0
    wd_incr_steps: int = 1
    wd_incr_style: str = "constant"

    def check(self, max_lr: float) -> None:
        """Raise for what megatron-core would assert on, naming NeMo-RL's config key."""
        keys = "policy.megatron_cfg.scheduler"
        if self.decay_style not in DECAY_STYLES:
            raise ValueError(
                f"{keys}.lr_decay_style={self.decay_style!r}: use one of {DECAY_STYLES}"
            )
        if self.wd_incr_style not in WD_INCR_STYLES:
            raise ValueError(
                f"{keys}.weight_decay_incr_style={self.wd_incr_style!r}: use one of "
                f"{WD_INCR_STYLES}"
            )
        if self.warmup_steps < 0 or self.decay_steps < 1:
            raise ValueError(
                f"{keys}: lr_warmup_iters ({self.warmup_steps}) must be >= 0 and "
                f"lr_decay_iters ({self.decay_steps}) >= 1"
            )
        if self.warmup_steps >= self.decay_steps:
            raise ValueError(
                f"{keys}.lr_warmup_iters={self.warmup_steps} must be below lr_decay_iters "
                f"({self.decay_steps}; unset, grpo.max_num_steps): the warm-up would never end. "
                "Lower lr_warmup_iters or raise lr_decay_iters"
            )
        if not 0 <= self.min_lr <= max_lr or not self.init_lr <= max_lr:
            raise ValueError(
                f"policy.megatron_cfg.optimizer.min_lr={self.min_lr} and {keys}.lr_warmup_init="
                f"{self.init_lr} must lie in [0, lr={max_lr}]"
            )
        if self.wd_incr_style == "constant" and self.start_wd != self.end_wd:
            raise ValueError(
                f"{keys}: start_weight_decay ({self.start_wd}) and end_weight_decay "
                f"({self.end_wd}) differ under weight_decay_incr_style 'constant'"
            )

    def build(self, optimizer: Any, max_lr: float) -> Any:
        """megatron-core's scheduler over `optimizer`, at step 0 (it sets the rates)."""
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

        self.check(max_lr)
        return OptimizerParamScheduler(
            optimizer,
            init_lr=self.init_lr,
            max_lr=max_lr,
            min_lr=self.min_lr,
            lr_warmup_steps=self.warmup_steps,
            lr_decay_steps=self.decay_steps,
            lr_decay_style=self.decay_style,
            start_wd=self.start_wd,
            end_wd=self.end_wd,
            wd_incr_steps=self.wd_incr_steps,
            wd_incr_style=self.wd_incr_style,
        )

    @staticmethod
    def at(scheduler: Any, completed_steps: int) -> float:
        """Set `scheduler`'s rates for the GRPO step after `completed_steps` steps; the
        learning rate (of the default parameter group) it now trains with."""
        scheduler.num_steps = completed_steps
        scheduler.step(increment=0)
        return float(scheduler.get_lr(scheduler.optimizer.param_groups[0]))
