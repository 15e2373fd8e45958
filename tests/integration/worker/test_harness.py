"""The multi-rank harness says why a rank failed: its traceback when it raised, its exit code
when it died without a result, and it does not wait for the ranks left in a collective."""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

from tests.integration.worker.harness import spawn_ranks
from tests.support.device import MULTI_RANK_CPU
from tests.support.ports import free_port

pytestmark = pytest.mark.cpu_only(reason=MULTI_RANK_CPU)


def _rank() -> int:
    return dist.get_rank()


def _rank_one_raises() -> int:
    if dist.get_rank() == 1:
        raise ValueError("rank one's own error")
    dist.barrier()  # rank 0 waits here for a peer that is gone
    return 0


def _rank_one_exits() -> int:
    if dist.get_rank() == 1:
        os._exit(3)
    dist.barrier()
    return 0


def _rank_tensor() -> torch.Tensor:
    return torch.full((4, 4), float(dist.get_rank()))


def test_every_rank_returns_its_result() -> None:
    assert spawn_ranks(_rank, free_port(), world=2) == {0: 0, 1: 1}


def test_tensor_results_outlive_the_ranks_that_made_them() -> None:
    """A rank exits right after reporting; its tensor must still be readable (a tensor put on
    the queue as itself lives in the rank's shared memory and was lost with it)."""
    by_rank = spawn_ranks(_rank_tensor, free_port(), world=3)
    for rank, tensor in by_rank.items():
        assert torch.equal(tensor, torch.full((4, 4), float(rank)))


def test_a_rank_that_raises_fails_with_its_traceback_without_waiting_for_the_others() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"(?s)rank 1 failed:.*ValueError: rank one's own"):
        spawn_ranks(_rank_one_raises, free_port(), world=2)
    assert time.monotonic() - started < 60  # not gloo's 30-minute collective timeout


def test_a_rank_that_exits_without_a_result_fails_with_its_exit_code() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match="rank 1 exited with code 3 before reporting"):
        spawn_ranks(_rank_one_exits, free_port(), world=2)
    assert time.monotonic() - started < 60


def _rank_view() -> tuple[int, str | None, bool]:
    import sys

    return os.getpid(), os.environ.get("HARNESS_PROBE"), "megatron.core" in sys.modules


def test_ranks_are_fresh_processes_with_the_callers_environment_and_imports_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ranks are forked from a server that imported megatron-core once
    (tests/support/warm_spawn.py), yet each is a process of its own that sees the environment
    the test had when it spawned them, as `spawn` children did (the server's is older)."""
    spawn_ranks(_rank, free_port(), world=2)  # the server is up before the variable is set
    monkeypatch.setenv("HARNESS_PROBE", "set after the server started")
    by_rank = spawn_ranks(_rank_view, free_port(), world=2)
    pids = {pid for pid, _, _ in by_rank.values()}
    assert len(pids) == 2 and os.getpid() not in pids
    assert {probe for _, probe, _ in by_rank.values()} == {"set after the server started"}
    assert all(preloaded for _, _, preloaded in by_rank.values())
