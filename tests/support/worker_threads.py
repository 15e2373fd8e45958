"""A pytest plugin: under pytest-xdist, each worker's torch gets its share of the cores.

Why: the suite runs as several workers (`-n`, pyproject.toml's addopts) on machines of 2 cores.
torch takes every core by default, so N workers run N x cores OpenMP threads, and OpenMP's
spinning threads then slow every worker down more than the second worker gains. Each worker
gets cores // workers threads, and OMP_NUM_THREADS says the same to the processes it starts
(the tests' ranks, verify's states), unless the caller set it. Nothing changes without xdist.
Loaded for every run by `-p tests.support.worker_threads` in pyproject.toml's addopts.
"""

from __future__ import annotations

import os

import pytest


def threads_per_worker(cores: int, workers: int) -> int:
    """The cores shared out among the workers, at least one each."""
    return max(1, cores // max(1, workers))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers or not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller, or a run without xdist
    threads = threads_per_worker(os.cpu_count() or 1, int(workers))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
