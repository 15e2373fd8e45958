"""Fixtures for the patch tripwire tests that need a running megatron-core.

megatron-core's DDP and model code hard-code CUDA in a few places; on a CPU machine the
redirects of `mcore_grpo.worker.cpu` (one small module, each redirect commented with the upstream line
needing it) make them run. They are active only inside the fixture and only without CUDA.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from tests.support.ports import free_port


@pytest.fixture(scope="session")
def mcore_parallel() -> Iterator[None]:
    """A world-size-1 process group (gloo without CUDA) with megatron-core parallel state.

    Reuses a process group / parallel state another fixture already set up in this session.
    """
    import torch.distributed as dist
    from mcore_grpo.worker.cpu import model_parallel_seed
    from megatron.core import parallel_state

    created_pg = False
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend, rank=0, world_size=1)
        created_pg = True
    created_mp = False
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=1, pipeline_model_parallel_size=1
        )
        created_mp = True
    model_parallel_seed(1234, "cuda" if torch.cuda.is_available() else "cpu")
    yield
    if created_mp:
        parallel_state.destroy_model_parallel()
    if created_pg:
        dist.destroy_process_group()


@pytest.fixture
def mcore_device(mcore_parallel: None) -> Iterator[str]:
    """The device megatron-core runs on; CPU redirects active for the test when CUDA is absent."""
    from mcore_grpo.worker.cpu import cpu_device

    device = "cuda" if torch.cuda.is_available() else "cpu"
    with cpu_device(device):
        yield device


@pytest.fixture
def gloo_world() -> Iterator[None]:
    """A world-size-1 gloo group WITHOUT megatron-core's parallel state, for checks that set up
    their own layout (`mcore_grpo.models.checks`, as the model matrix's ranks do). The session's
    `mcore_parallel` state, when another test made it, is set aside and restored after."""
    import torch.distributed as dist
    from mcore_grpo.worker.cpu import model_parallel_seed
    from megatron.core import parallel_state

    created = not dist.is_initialized()
    if created:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        dist.init_process_group("gloo", rank=0, world_size=1)
    had_state = parallel_state.model_parallel_is_initialized()
    if had_state:
        parallel_state.destroy_model_parallel()
    yield
    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    if had_state:  # as mcore_parallel made it
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=1, pipeline_model_parallel_size=1
        )
        model_parallel_seed(1234, "cuda" if torch.cuda.is_available() else "cpu")
    if created:
        dist.destroy_process_group()
