"""Rank functions for the 2-process engine-lifecycle tests, and the stand-in engine.

Kept apart from the test module so the spawned ranks import only torch and the lifecycle,
not megatron-core (whose import takes seconds per process).
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from mcore_grpo.worker.engine_lifecycle import (
    EngineLifecycleError,
    EngineState,
    SynchronizedEngineLifecycle,
)

SLOW_S = 0.5  # the slow rank's resume/step takes this long; the checks have this margin


class StandInEngine:
    """Suspend/resume with timestamps; `step` refuses while suspended, like megatron's."""

    def __init__(
        self, resume_delay: float = 0.0, fail_resume: bool = False, suspended: bool = False
    ) -> None:
        self.suspended = suspended  # megatron-core's engine starts running
        self.resume_delay = resume_delay
        self.fail_resume = fail_resume
        self.events: list[tuple[str, float]] = []

    def suspend(self) -> None:
        self.suspended = True
        self.events.append(("suspended", time.monotonic()))

    def resume(self) -> None:
        time.sleep(self.resume_delay)
        if self.fail_resume:
            raise RuntimeError("out of memory reallocating the KV cache")
        self.suspended = False
        self.events.append(("resumed", time.monotonic()))

    def step(self, work_s: float = 0.0) -> None:
        if self.suspended:
            from megatron.core.inference.engines import EngineSuspendedError

            raise EngineSuspendedError(0)
        self.events.append(("step", time.monotonic()))
        dist.all_reduce(torch.ones(1))  # an engine step is a collective ...
        time.sleep(work_s)  # ... followed here by local work that still needs the KV cache
        self.events.append(("step-done", time.monotonic()))


def _times(engine: StandInEngine, name: str) -> list[float]:
    return [t for event, t in engine.events if event == name]


def _resume_then_step(synchronized: bool) -> dict[str, list[float]]:
    engine = StandInEngine(resume_delay=SLOW_S if dist.get_rank() == 1 else 0.0, suspended=True)
    if synchronized:
        SynchronizedEngineLifecycle(engine, state=EngineState.SUSPENDED).resume()
    else:
        engine.resume()
    engine.step()
    return {"resumed": _times(engine, "resumed"), "step": _times(engine, "step")}


def synchronized_resume() -> dict[str, list[float]]:
    return _resume_then_step(synchronized=True)


def naive_resume() -> dict[str, list[float]]:
    return _resume_then_step(synchronized=False)


def _suspend_while_peer_steps(synchronized: bool) -> dict[str, list[float]]:
    engine = StandInEngine()
    lifecycle = SynchronizedEngineLifecycle(engine, state=EngineState.SERVING)
    if dist.get_rank() == 1:
        engine.step(work_s=SLOW_S)  # rank 0 has no step queued: it goes straight to suspend
    else:
        dist.all_reduce(torch.ones(1))  # rank 0's half of the peer's step collective
    if synchronized:
        lifecycle.suspend()
    else:
        engine.suspend()
    return {
        "suspended": _times(engine, "suspended"),
        "step-done": _times(engine, "step-done"),
        "state": [0.0 if lifecycle.state is EngineState.SUSPENDED else 1.0],
    }


def suspend_while_peer_steps() -> dict[str, list[float]]:
    return _suspend_while_peer_steps(synchronized=True)


def naive_suspend_while_peer_steps() -> dict[str, list[float]]:
    return _suspend_while_peer_steps(synchronized=False)


def one_rank_fails_to_resume() -> dict[str, Any]:
    engine = StandInEngine(fail_resume=dist.get_rank() == 1, suspended=True)
    lifecycle = SynchronizedEngineLifecycle(engine, state=EngineState.SUSPENDED)
    try:
        lifecycle.resume()
    except EngineLifecycleError as exc:
        return {"error": str(exc), "state": lifecycle.state.value, "suspended": engine.suspended}
    return {"error": "", "state": lifecycle.state.value, "suspended": engine.suspended}
