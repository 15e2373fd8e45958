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
    if not dist.is_initialized():
        os.environ.update(
            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1"
        )
        dist.init_process_group("gloo", rank=0, world_size=1)
    yield
