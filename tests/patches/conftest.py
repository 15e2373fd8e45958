"""Fixtures for the patch tripwire tests that need a running megatron-core.

megatron-core's DDP and model code hard-code CUDA in a few places; on a CPU machine the
redirects of `mcore_grpo.worker.cpu` (one small module, each redirect commented with the upstream line
needing it) make them run. They are active only inside the fixture and only without CUDA.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from tests.support.parallel import parallel_layout


@pytest.fixture
def mcore_parallel(process_group: None) -> Iterator[None]:
    """megatron-core TP=1/PP=1 parallel state on the session's world (gloo without CUDA),
    seeded; the state found before is put back after."""
    with parallel_layout(seed=1234, device="cuda" if torch.cuda.is_available() else "cpu"):
        yield


@pytest.fixture
def mcore_device(mcore_parallel: None) -> Iterator[str]:
    """The device megatron-core runs on; CPU redirects active for the test when CUDA is absent."""
    from mcore_grpo.worker.cpu import cpu_device

    device = "cuda" if torch.cuda.is_available() else "cpu"
    with cpu_device(device):
        yield device


@pytest.fixture
def gloo_world(process_group: None) -> Iterator[None]:
    """The session's world WITHOUT megatron-core's parallel state, for checks that set up
    their own layout (`model_matrix.checks`, as the model matrix's ranks do). A state
    another fixture holds is set aside and put back after."""
    with parallel_layout(None):
        yield
