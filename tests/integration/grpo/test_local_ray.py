"""The local Ray the drivers start runs its actors at the driver's priority (local_ray.py)."""

from __future__ import annotations

import os

import pytest
from mcore_grpo.grpo.local_ray import NICENESS_ENV, start_local_ray


@pytest.mark.timeout(300)
def test_actors_run_at_the_drivers_niceness(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's default (15) starves the actors behind any busy process on the node."""
    monkeypatch.delenv(NICENESS_ENV, raising=False)
    monkeypatch.setenv("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    import ray

    assert not ray.is_initialized()
    start_local_ray(1)
    try:

        @ray.remote(num_cpus=1)
        class Probe:
            def niceness(self) -> int:
                return os.nice(0)

        probe = Probe.remote()  # type: ignore[attr-defined]
        actor_niceness = ray.get(probe.niceness.remote(), timeout=240)
    finally:
        ray.shutdown()
    assert actor_niceness == os.nice(0)
