"""NeMo-RL's own logged metrics, read back: the tensorboard scalars its `Logger` wrote.

`grpo_train` logs ``train/reward`` (the mean reward of the step's samples), ``train/loss``,
``timing/train/total_step_time`` and the rest once per step through `Logger.log_metrics`;
the run turns on NeMo-RL's tensorboard backend (``logger.tensorboard_enabled``), so these are
the figures NeMo-RL itself recorded, not a copy kept by this package.
"""

from __future__ import annotations

from pathlib import Path


def read_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag under `log_dir` (recursively) -> [(step, value)] in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[tuple[int, float]]] = {}
    for events in sorted({p.parent for p in Path(log_dir).rglob("events.out.tfevents.*")}):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        tags: dict = acc.Tags()  # type: ignore[assignment]  # tensorboard's stub is too loose
        for tag in tags["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return {tag: sorted(values) for tag, values in out.items()}


def reward_curve(log_dir: Path) -> list[float]:
    """``train/reward`` per step, step 1 first."""
    scalars = read_scalars(log_dir)
    if "train/reward" not in scalars:
        raise FileNotFoundError(f"no train/reward scalars under {log_dir}")
    return [value for _, value in scalars["train/reward"]]
