"""``checkpointing.checkpoint_must_save_by``: NeMo-RL's time limit by which a run must have
saved (a job's wall-clock limit), read as NeMo-RL reads it, and the check after each step.

A leaf: the config's schema (`mcore_grpo.config.schema`) reads the setting through
`must_save_by_seconds`, whose `ValueError` it reports as a `ConfigError` naming the source.
"""

from __future__ import annotations

import time


def must_save_by_seconds(text: str | None) -> int | None:
    """``checkpointing.checkpoint_must_save_by`` in seconds, as NeMo-RL's `convert_to_seconds`
    reads it ("DD:HH:MM:SS"); None when unset; `ValueError` naming the key and the format."""
    if text is None:
        return None
    parts = str(text).split(":")
    if len(parts) != 4 or not all(part.isdigit() for part in parts):
        raise ValueError(
            f"checkpointing.checkpoint_must_save_by={text!r}: use NeMo-RL's 'DD:HH:MM:SS', "
            "e.g. '00:03:45:00' for 3 h 45 min"
        )
    days, hours, minutes, seconds = (int(part) for part in parts)
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


class Deadline:
    """NeMo-RL's `TimeoutChecker` with ``fit_last_save_time``: reached once the time since the
    run began plus a mean step would pass the limit (so the save lands before it)."""

    def __init__(self, limit_s: int | None) -> None:
        self.limit_s = limit_s
        self.start = time.monotonic()
        self.last = self.start
        self.steps: list[float] = []

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def mean_step(self) -> float:
        return sum(self.steps) / len(self.steps) if self.steps else 0.0

    def reached(self) -> bool:
        """Mark a step's end; whether the run must end after it."""
        now = time.monotonic()
        self.steps.append(now - self.last)
        self.last = now
        return self.limit_s is not None and self.elapsed() + self.mean_step() >= self.limit_s
