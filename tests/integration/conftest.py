"""Shared fixtures: one gloo process group (world size 1) for in-process worker tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch.distributed as dist

from tests.support.ports import free_port


@pytest.fixture(scope="session")
def world1() -> Iterator[None]:
    """torch.distributed (gloo) with this process as the only rank."""
    created = not dist.is_initialized()
    if created:
        os.environ.update(
            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1"
        )
        dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    if created and dist.is_initialized():
        # Tear the groups down before the interpreter exits: gloo threads still running at
        # exit can abort the process ("terminate called without an active exception").
        from megatron.core import parallel_state

        if parallel_state.model_parallel_is_initialized():
            parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
