"""Shared fixtures: the test device and one process group (world size 1) for in-process
worker tests: `cuda` (NCCL) where CUDA is available, else `cpu` (gloo, with the worker's CPU
redirects)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist

from tests.support.device import TEST_DEVICE
from tests.support.ports import free_port


@pytest.fixture(scope="session")
def device() -> str:
    """`cuda` when available, else `cpu` (the worker's CPU redirects make megatron-core run)."""
    return TEST_DEVICE


@pytest.fixture(scope="session")
def world1() -> Iterator[None]:
    """torch.distributed with this process as the only rank (NCCL on CUDA, gloo on CPU)."""
    created = not dist.is_initialized()
    if created:
        os.environ.update(
            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1"
        )
        from mcore_grpo.worker.parallel import backend_for

        dist.init_process_group(backend_for(TEST_DEVICE), rank=0, world_size=1)
    yield
    if created and dist.is_initialized():
        # Tear the groups down before the interpreter exits: gloo threads still running at
        # exit can abort the process ("terminate called without an active exception").
        from megatron.core import parallel_state

        if parallel_state.model_parallel_is_initialized():
            parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


@pytest.fixture
def tp1(world1: None, device: str) -> Iterator[None]:
    """TP=1 parallel state; on CPU inside the worker's redirects (megatron's score buffer
    comes from `torch.cuda.current_device()`); tensors default to the test device."""
    from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1)
    try:
        model_parallel_seed(0, device)  # megatron's dropout forks its RNG tracker
        with cpu_device(device), torch.device(device):
            yield
    finally:
        parallel_state.destroy_model_parallel()
