"""megatron-core's `OptimizerParamScheduler` for an `LRSchedule` (`mcore_grpo.config.schedule`),
and the rate of a GRPO step.

The schedule is set from the step number (`lr_at`), not advanced by a call per step: a resumed
run gets the rate of its step with no scheduler state in the checkpoint.
"""

from __future__ import annotations

from typing import Any

from mcore_grpo.config.schedule import LRSchedule


def build_scheduler(schedule: LRSchedule, optimizer: Any, max_lr: float) -> Any:
    """megatron-core's scheduler over `optimizer`, at step 0 (it sets the rates)."""
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    schedule.check(max_lr)
    return OptimizerParamScheduler(
        optimizer,
        init_lr=schedule.init_lr,
        max_lr=max_lr,
        min_lr=schedule.min_lr,
        lr_warmup_steps=schedule.warmup_steps,
        lr_decay_steps=schedule.decay_steps,
        lr_decay_style=schedule.decay_style,
        start_wd=schedule.start_wd,
        end_wd=schedule.end_wd,
        wd_incr_steps=schedule.wd_incr_steps,
        wd_incr_style=schedule.wd_incr_style,
    )


def lr_at(scheduler: Any, completed_steps: int) -> float:
    """Set `scheduler`'s rates for the GRPO step after `completed_steps` steps; the learning
    rate (of the default parameter group) it now trains with."""
    scheduler.num_steps = completed_steps
    scheduler.step(increment=0)
    return float(scheduler.get_lr(scheduler.optimizer.param_groups[0]))
