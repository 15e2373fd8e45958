"""Engine suspend/resume agreed by all ranks (2 gloo ranks), and the worker's use of it.

The stand-in engine raises megatron-core's own `EngineSuspendedError` when stepped while
suspended, and its step is a collective, as a real engine step is. Times are
`time.monotonic()`, one clock for every process of this machine.
"""

from __future__ import annotations

import pytest
from mcore_grpo.worker.engine_lifecycle import EngineState
from mcore_grpo.worker.generation import SamplingParams

from tests.integration.worker.engine_ranks import (
    SLOW_S,
    StandInEngine,
    naive_resume,
    naive_suspend_while_peer_steps,
    one_rank_fails_to_resume,
    suspend_while_peer_steps,
    synchronized_resume,
)
from tests.integration.worker.harness import make_worker, prompts, seeded, spawn2, tiny_config
from tests.support.device import MULTI_RANK_CPU
from tests.support.ports import free_port


@pytest.mark.cpu_only(reason=MULTI_RANK_CPU)
def test_no_rank_steps_before_every_rank_resumed() -> None:
    out = spawn2(synchronized_resume, free_port())
    last_resume = max(out[r]["resumed"][0] for r in (0, 1))
    first_step = min(out[r]["step"][0] for r in (0, 1))
    assert first_step >= last_resume, out


@pytest.mark.cpu_only(reason=MULTI_RANK_CPU)
def test_without_the_lifecycle_a_rank_steps_while_its_peer_is_suspended() -> None:
    """The counter-check: the same timing measure shows the race on plain per-rank resume."""
    out = spawn2(naive_resume, free_port())
    assert out[0]["step"][0] < out[1]["resumed"][0] - SLOW_S / 2, out


@pytest.mark.cpu_only(reason=MULTI_RANK_CPU)
def test_no_rank_suspends_while_a_peer_is_still_stepping() -> None:
    out = spawn2(suspend_while_peer_steps, free_port())
    assert out[0]["suspended"][0] >= out[1]["step-done"][0], out
    assert out[0]["state"] == out[1]["state"] == [0.0]


@pytest.mark.cpu_only(reason=MULTI_RANK_CPU)
def test_without_the_lifecycle_a_rank_suspends_while_its_peer_steps() -> None:
    """The counter-check for suspend: plain per-rank suspend frees the KV cache mid-step."""
    out = spawn2(naive_suspend_while_peer_steps, free_port())
    assert out[0]["suspended"][0] < out[1]["step-done"][0] - SLOW_S / 2, out


@pytest.mark.cpu_only(reason=MULTI_RANK_CPU)
def test_a_failed_resume_raises_on_every_rank_and_leaves_all_suspended() -> None:
    out = spawn2(one_rank_fails_to_resume, free_port())
    for rank in (0, 1):
        assert "engine resume failed on rank 1 (RuntimeError: out of memory" in out[rank]["error"]
        assert out[rank]["state"] == "suspended"
        assert out[rank]["suspended"] is True  # rank 0 resumed, then suspended again
    assert "this rank succeeded" in out[0]["error"]
    assert "this rank failed" in out[1]["error"]


def test_worker_resumes_for_generation_and_suspends_on_leaving_it(world1: None) -> None:
    engine = StandInEngine()  # running, as megatron-core's engine starts
    worker = make_worker(tiny_config(overlap=False), generation_engine=engine)
    lifecycle = worker.engine_lifecycle
    # The worker starts in training: the engine's memory is freed at construction.
    assert lifecycle is not None and lifecycle.state is EngineState.SUSPENDED
    assert engine.suspended
    worker.prepare_for_generation()
    assert lifecycle.state is EngineState.SERVING and not engine.suspended
    ids, mask = prompts(rows=2)
    worker.generate(ids, mask, SamplingParams(max_new_tokens=2), seeded(0))
    worker.finish_generation()
    assert lifecycle.state is EngineState.SUSPENDED and engine.suspended
    for leave in (worker.prepare_for_training, worker.offload_before_refit):
        worker.prepare_for_generation()
        leave()
        assert engine.suspended, leave.__name__
    worker.prepare_for_training()
    assert [event for event, _ in engine.events].count("resumed") == 3


def test_worker_generate_refuses_while_the_engine_is_suspended(world1: None) -> None:
    engine = StandInEngine()
    worker = make_worker(tiny_config(overlap=False), generation_engine=engine)
    worker.prepare_for_generation()
    lifecycle = worker.engine_lifecycle
    assert lifecycle is not None
    lifecycle.suspend()  # e.g. a failed resume left every rank suspended
    ids, mask = prompts(rows=2)
    with pytest.raises(RuntimeError, match="generate called while the generation engine"):
        worker.generate(ids, mask, SamplingParams(max_new_tokens=2))
