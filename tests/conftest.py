"""The session's device and world, and device markers for the whole suite: `gpu` tests skip without CUDA, `cpu_only` tests skip
with CUDA (each says why it is CPU-only by nature), so `pytest` passes on both machines."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from tests.support.device import TEST_DEVICE
from tests.support.model_checks import NVTE_BACKEND_VARS


@pytest.fixture(scope="session")
def device() -> str:
    """`cuda` when available, else `cpu` (the worker's CPU redirects make megatron-core run)."""
    return TEST_DEVICE


@pytest.fixture(scope="session")
def process_group() -> Iterator[None]:
    """torch.distributed with this process as the only rank (NCCL on CUDA, gloo on CPU), for
    the session; one another fixture or test made is used as it is and left to its maker."""
    import torch.distributed as dist
    from mcore_grpo.worker.parallel import backend_for

    from tests.support.parallel import start_world1

    created = start_world1(backend_for(TEST_DEVICE))
    yield
    if created and dist.is_initialized():
        # Tear the groups down before the interpreter exits: gloo threads still running at
        # exit can abort the process ("terminate called without an active exception").
        from megatron.core import parallel_state

        if parallel_state.model_parallel_is_initialized():
            parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


@pytest.fixture
def world1(process_group: None) -> Iterator[None]:
    """The session's world of one rank for a test that builds a worker (which sets up
    megatron-core's parallel state): the parallel state found is put back after the test."""
    from tests.support.parallel import parallel_state_kept

    with parallel_state_kept():
        yield


@pytest.fixture(scope="module")
def module_world1(process_group: None) -> Iterator[None]:
    """`world1` for a module's shared worker: the parallel state and the NVTE_* variables its
    model sets (`attention_backend_env`) are put back after the module."""
    from tests.support.parallel import parallel_state_kept

    with parallel_state_kept(), attention_backend_vars_kept():
        yield


@contextmanager
def attention_backend_vars_kept() -> Iterator[None]:
    """The NVTE_* variables as found, after a block that builds models. megatron-core's
    LanguageModule sets them from each model's config (`_set_attention_backend`) and refuses a
    later model whose attention_backend disagrees."""
    saved = {name: os.environ.get(name) for name in NVTE_BACKEND_VARS}
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module", autouse=True)
def forgotten_groups_released() -> Iterator[None]:
    """After each test module (and its module fixtures, torn down first), the process groups
    megatron-core forgot without destroying are destroyed (`release_forgotten_groups`)."""
    yield
    from tests.support.parallel import release_forgotten_groups

    release_forgotten_groups()


@pytest.fixture(autouse=True)
def attention_backend_env() -> Iterator[None]:
    """The models a test builds live for the test: so do the NVTE_* variables they set."""
    with attention_backend_vars_kept():
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip by device, with the marker's reason in the report."""
    cuda = torch.cuda.is_available()
    for item in items:
        if not cuda and item.get_closest_marker("gpu") is not None:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (marked gpu)"))
        cpu_only = item.get_closest_marker("cpu_only")
        if cuda and cpu_only is not None:
            reason = cpu_only.kwargs.get("reason") or (cpu_only.args[0] if cpu_only.args else "")
            if not reason:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.cpu_only needs a reason")
            item.add_marker(pytest.mark.skip(reason=f"CPU-only by nature: {reason}"))
