"""The in-process world and megatron-core parallel state of the tests, each restored as found.

Why one module: torch.distributed's world and megatron-core's `parallel_state` are process-wide.
A fixture or helper that tears down what another set up (a session's world, a module's worker
layout) breaks the tests after it, in an order that changes from run to run (pytest-randomly).
So each user states the layout it needs; what was there before is set aside and put back.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch.distributed as dist

from tests.support.ports import free_port


def start_world1(backend: str) -> bool:
    """This process as the only rank, unless a world already exists; whether it made one.

    Through a TCP address, not MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE: the environment stays
    as the test found it."""
    if dist.is_initialized():
        return False
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    return True


@dataclass(frozen=True)
class Layout:
    """The sizes `initialize_model_parallel` was called with (what a restore needs)."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int | None = None


def current_layout() -> Layout | None:
    """The live parallel state's layout, or None when megatron-core's is not initialized."""
    from megatron.core import parallel_state as ps

    if not ps.model_parallel_is_initialized():
        return None
    return Layout(
        tp=ps.get_tensor_model_parallel_world_size(),
        pp=ps.get_pipeline_model_parallel_world_size(),
        ep=ps.get_expert_model_parallel_world_size(),
        etp=ps.get_expert_tensor_parallel_world_size(),
    )


def _same(a: Layout, b: Layout) -> bool:
    """Equal sizes; an unset expert-TP size means the TP size, as megatron-core reads it."""
    return (a.tp, a.pp, a.ep, a.etp or a.tp) == (b.tp, b.pp, b.ep, b.etp or b.tp)


def _set(layout: Layout | None) -> None:
    from megatron.core import parallel_state as ps

    if ps.model_parallel_is_initialized():
        ps.destroy_model_parallel()
    if layout is not None:
        ps.initialize_model_parallel(
            tensor_model_parallel_size=layout.tp,
            pipeline_model_parallel_size=layout.pp,
            expert_model_parallel_size=layout.ep,
            expert_tensor_parallel_size=layout.etp,
        )


@contextmanager
def parallel_layout(
    layout: Layout | None = Layout(), *, seed: int | None = None, device: str = "cpu"
) -> Iterator[None]:
    """megatron-core's parallel state at `layout` (None: none at all) for a block, its RNG
    trackers seeded with `seed` for `device` when given; the state found is put back after.

    A state already at `layout` is reused as it is (a module's worker keeps its groups)."""
    from mcore_grpo.worker.cpu import model_parallel_seed

    found = current_layout()
    reuse = found is not None and layout is not None and _same(found, layout)
    if not reuse:
        _set(layout)
    try:
        if seed is not None and layout is not None:
            model_parallel_seed(seed, device)
        yield
    finally:
        if not reuse:
            _set(found)


@contextmanager
def parallel_state_kept() -> Iterator[None]:
    """The parallel state found put back after a block that may set up its own (a worker
    initializes TP=1 when none exists) or tear it down."""
    found = current_layout()
    try:
        yield
    finally:
        now = current_layout()
        if not (now is found is None or (now and found and _same(now, found))):
            _set(found)


def release_forgotten_groups() -> int:
    """Destroy the process groups nothing uses any more; how many.

    megatron-core's `destroy_model_parallel()` forgets the groups it made without destroying
    them (at the pin and on main it destroys only its `*_GLOO` helpers), so every
    re-initialization in a test left ~20 gloo groups behind, each with a loop thread that
    wakes up: one pytest process of a full run held 3,497 threads, load average 575 on 2 cores,
    and every test after ran slower. Called between test modules (tests/conftest.py), when no
    module's worker holds groups: every group but the default one and megatron-core's current
    ones is garbage then."""
    if not dist.is_initialized():
        return 0
    from torch.distributed import distributed_c10d as c10d

    keep = {id(c10d.GroupMember.WORLD)}
    if "megatron.core.parallel_state" in sys.modules:  # never imported here for this
        from mcore_grpo.worker.memory.nccl_offload import find_megatron_process_groups

        held = find_megatron_process_groups(is_nccl_like=lambda _name, _group: True)
        keep |= {id(group) for _, group in held}
    forgotten = [g for g in list(c10d._world.pg_map) if g is not None and id(g) not in keep]
    for group in forgotten:
        dist.destroy_process_group(group)
    return len(forgotten)
