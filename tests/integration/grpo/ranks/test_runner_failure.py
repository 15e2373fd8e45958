"""After a worker fails, `RayRunner.call` answers every later call with that failure.

NeMo-RL's rollout submits generation from concurrent coroutines: a batch queued while the
failing one ran is dispatched after the runner killed its actors. That call must raise the
run's `WorkerFailed` (the abort line names the dead worker), not an error about the empty
actor list (CI, 2026-11-27: "zip() argument 2 is longer than argument 1" replaced the abort
line of the NeMo-RL driver's killed-worker test).
"""

from __future__ import annotations

from typing import Any

import pytest
from mcore_grpo.grpo.cluster import fault
from mcore_grpo.grpo.cluster.placement import WorkerPlace
from mcore_grpo.grpo.ranks.runner import RayRunner, WorkerFailed


class _Method:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def remote(self, *args: Any) -> str:
        self.log.append(self.name)
        return f"ref:{self.name}"


class _Actor:
    """A Ray actor handle: ``actor.method.remote(*args)`` returns a ref."""

    def __init__(self) -> None:
        self.dispatched: list[str] = []

    def __getattr__(self, name: str) -> _Method:
        return _Method(self.dispatched, name)


class _Ray:
    def __init__(self) -> None:
        self.killed: list[Any] = []

    def kill(self, actor: Any, no_restart: bool) -> None:
        self.killed.append(actor)

    def get(self, refs: list[Any]) -> list[Any]:
        return refs


def _runner(monkeypatch: pytest.MonkeyPatch, faults: list[fault.RankFault]) -> RayRunner:
    """A two-rank runner over fake actors whose first gather reports `faults`."""
    runner = object.__new__(RayRunner)
    runner._ray = _Ray()
    runner.world_size = 2
    runner.actors = [_Actor(), _Actor()]
    runner.places = [WorkerPlace(r, f"node{r}", "10.0.0.1", 100 + r) for r in range(2)]
    runner.collective_timeout_s = 60.0
    runner.fault_wait_s = 5.0
    runner.failure = None
    answers = [faults]
    monkeypatch.setattr(fault, "gather", lambda *a, **k: answers.pop(0) if answers else [])
    return runner


def test_a_call_after_a_failure_raises_that_failure_and_dispatches_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    died = fault.RankFault(
        WorkerPlace(1, "node1", "10.0.0.1", 101), fault.Cause.PROCESS_DIED, "exited"
    )
    runner = _runner(monkeypatch, [died])
    actors = list(runner.actors)
    with pytest.raises(WorkerFailed) as first:
        runner.call("generate_nemo_rl", [(), ()])
    assert "worker rank 1 died in generate_nemo_rl" in str(first.value)
    assert runner.actors == [] and runner._ray.killed == actors

    with pytest.raises(WorkerFailed) as queued:
        runner.call("generate_nemo_rl", [(), ()])
    assert str(queued.value) == str(first.value)
    assert [a.dispatched for a in actors] == [["generate_nemo_rl"], ["generate_nemo_rl"]]


def test_calls_without_a_failure_return_every_ranks_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runner = _runner(monkeypatch, [])
    assert runner.call("ready", [(), ()]) == ["ref:ready", "ref:ready"]
    assert runner.call("ready", [(), ()]) == ["ref:ready", "ref:ready"]
    assert runner.failure is None
