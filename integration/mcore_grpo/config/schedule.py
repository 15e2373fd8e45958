"""The learning-rate and weight-decay schedule, counted in GRPO steps as NeMo-RL counts it (built
as megatron-core's `OptimizerParamScheduler` by `mcore_grpo.worker.lr_schedule`).

NeMo-RL builds the scheduler through Megatron-Bridge with every length in samples
(``lr_warmup_iters * train_global_batch_size``, ...) and steps it by
``train_global_batch_size`` once per `train()` call, i.e. once per GRPO step however many
optimizer steps that call makes (megatron_policy_worker.py: "one tick == one train() call").
Counting in GRPO steps with an increment of 1 gives the same learning rate at every step.

"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcore_grpo.config.schema import RunConfig

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


def lr_schedule(config: RunConfig) -> LRSchedule:
    """`policy.megatron_cfg.scheduler` in the worker's terms: lengths in GRPO steps, the
    weight decays NeMo-RL's interpolations make them."""
    mc = config.policy.megatron_cfg
    s, wd = mc.scheduler, mc.optimizer.weight_decay
    steps = s.lr_decay_iters if s.lr_decay_iters is not None else config.grpo.max_num_steps
    return LRSchedule(
        init_lr=s.lr_warmup_init,
        min_lr=mc.optimizer.min_lr,
        warmup_steps=s.lr_warmup_iters,
        decay_steps=steps,
        decay_style=s.lr_decay_style,
        start_wd=wd if s.start_weight_decay is None else s.start_weight_decay,
        end_wd=wd if s.end_weight_decay is None else s.end_weight_decay,
        wd_incr_steps=config.grpo.max_num_steps,
        wd_incr_style=s.weight_decay_incr_style,
    )
