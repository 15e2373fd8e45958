"""Suspend/resume of a generation engine as one decision of all ranks.

megatron-core's `DynamicInferenceEngine.suspend()` / `resume()` act on one rank, and its step
raises `EngineSuspendedError` while that rank is suspended. Every engine step runs collectives
across the model-parallel ranks. So when one rank resumes and starts stepping while a peer is
still suspended (or still loading refit weights), that peer raises `EngineSuspendedError`, or
the collective waits until the NCCL watchdog fires. Both happened in the seed's GRPO run.

`SynchronizedEngineLifecycle` turns each transition into a collective:

- suspend: a barrier first, so no rank frees its KV cache while a peer may still be inside a
  step; then each rank suspends and all agree that every rank did;
- resume: each rank resumes, then all ranks exchange the outcome. Only when every rank
  succeeded does any rank serve. If one failed, every rank raises `EngineLifecycleError`
  naming the failed ranks, and the ranks that did resume suspend again, so the group stays in
  one state.

The engine is anything with `suspend()` and `resume()`. On GPU that is megatron-core's
engine. The CPU tests use a stand-in that raises megatron-core's own `EngineSuspendedError`.

Limit: the exchange after resume catches failures that return control to this rank.
megatron-core's `resume()` is itself collective: it rebuilds CUDA graphs with warm-up
forwards that all-reduce across tensor-parallel ranks. So a rank that fails before those
(e.g. out of memory while reallocating) leaves its peers blocked inside `resume()`, and
the process-group timeout ends that, not this class. Nor does it clean up after a rank
whose own resume failed: what that rank half-allocated stays until its engine is rebuilt.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol

import torch.distributed as dist


class SuspendableEngine(Protocol):
    """What the lifecycle needs from an engine (megatron-core's DynamicInferenceEngine fits)."""

    def suspend(self) -> None: ...

    def resume(self) -> None: ...


class EngineState(enum.Enum):
    SUSPENDED = "suspended"
    SERVING = "serving"


class EngineLifecycleError(RuntimeError):
    """A suspend or resume failed on at least one rank; raised on every rank alike."""


class SynchronizedEngineLifecycle:
    """One engine per rank, suspended and resumed by all ranks of `group` together.

    Every rank of `group` must call `suspend()` / `resume()` in the same order, like any
    collective. The state is the agreed one: `SERVING` only after every rank resumed.
    """

    def __init__(self, engine: SuspendableEngine, *, state: EngineState, group: Any = None) -> None:
        """`state`: what the engine is on every rank now. megatron-core's engine starts
        running (SERVING), so a worker that starts in training suspends it right away."""
        self.engine = engine
        self.group = group
        self._state = state

    @property
    def state(self) -> EngineState:
        return self._state

    def require_serving(self, call: str) -> None:
        """Raise unless all ranks agreed the engine is serving (before submitting requests)."""
        if self._state is not EngineState.SERVING:
            raise RuntimeError(
                f"{call} called while the generation engine is suspended on all ranks; call "
                "prepare_for_generation() first (it resumes the engine on every rank together)"
            )

    def suspend(self) -> None:
        """Barrier (no peer is still stepping), suspend, agree. No-op when suspended."""
        if self._state is EngineState.SUSPENDED:
            return
        dist.barrier(group=self.group)
        error = _attempt(self.engine.suspend)
        failed = self._agree(error)
        # A suspend that failed somewhere still ends serving everywhere: requests must stop.
        self._state = EngineState.SUSPENDED
        if failed:
            raise EngineLifecycleError(_describe("suspend", failed, error))

    def resume(self) -> None:
        """Resume, agree, then serve. No-op when serving; on any failure all ranks raise."""
        if self._state is EngineState.SERVING:
            return
        error = _attempt(self.engine.resume)
        failed = self._agree(error)
        if not failed:
            self._state = EngineState.SERVING
            return
        undo = _attempt(self.engine.suspend) if error is None else None
        message = _describe("resume", failed, error)
        if undo is not None:
            message += f"; suspending this rank again also failed: {undo}"
        raise EngineLifecycleError(message)

    def _agree(self, error: str | None) -> dict[int, str]:
        """Every rank's outcome, exchanged: {group rank: error} of the ranks that failed."""
        outcomes: list[Any] = [None] * dist.get_world_size(group=self.group)
        dist.all_gather_object(outcomes, error, group=self.group)
        return {rank: out for rank, out in enumerate(outcomes) if out is not None}


def _attempt(step: Any) -> str | None:
    """Run `step`; its exception as one line, or None (the outcome is shared, not raised)."""
    try:
        step()
    except Exception as exc:  # every rank must reach the exchange, whatever failed
        return f"{type(exc).__name__}: {exc}"
    return None


def _describe(what: str, failed: dict[int, str], local: str | None) -> str:
    ranks = ", ".join(f"rank {rank} ({why})" for rank, why in sorted(failed.items()))
    here = "this rank failed" if local else "this rank succeeded"
    return (
        f"engine {what} failed on {ranks}; {here}. Every rank now reports the engine "
        f"suspended; fix the failing rank and call prepare_for_generation() again"
    )
