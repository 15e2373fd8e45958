"""Fixtures of the in-process worker tests: TP=1 parallel state on the session's world
(`process_group`, tests/conftest.py), `cuda` (NCCL) where CUDA is available, else `cpu` (gloo, with the
worker's CPU redirects)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from tests.support.parallel import parallel_layout


@pytest.fixture
def tp1(process_group: None, device: str) -> Iterator[None]:
    """TP=1 parallel state, seeded; on CPU inside the worker's redirects (megatron's score
    buffer comes from `torch.cuda.current_device()`); tensors default to the test device."""
    from mcore_grpo.worker.cpu import cpu_device

    with parallel_layout(seed=0, device=device), cpu_device(device), torch.device(device):
        yield
