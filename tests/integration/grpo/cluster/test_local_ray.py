"""The local Ray the drivers start (local_ray.py): its actors run at the driver's priority, and
code asking for "the" cluster finds this run's own even when another Ray runs on the machine."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from mcore_grpo.grpo.cluster.local_ray import (
    ADDRESS_ENV,
    NICENESS_ENV,
    start_local_ray,
    stop_local_ray,
)


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
        stop_local_ray()
    assert actor_niceness == os.nice(0)


# address="local": a new cluster even where /tmp/ray/ray_current_cluster names one (a stale
# file of a killed run made a bare ray.init() try to attach and raise).
OTHER_RUN = """
import sys, time, ray
ray.init(address="local", num_cpus=1, include_dashboard=False)
print(ray.get_runtime_context().gcs_address, flush=True)
time.sleep(600)
"""


@pytest.mark.timeout(300)
def test_a_second_ray_on_the_machine_does_not_confuse_address_lookups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NeMo-RL's memory tracker calls `memory_summary()` without an address every step: with
    another run's Ray up, Ray refused ("Found multiple active Ray instances")."""
    monkeypatch.delenv(ADDRESS_ENV, raising=False)
    monkeypatch.setenv("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    import ray
    from ray._private.internal_api import memory_summary

    other = subprocess.Popen(
        [sys.executable, "-c", OTHER_RUN], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    try:
        assert other.stdout is not None
        other_address = other.stdout.readline().strip()
        assert other_address, "the other run's Ray did not start"
        start_local_ray(1)
        try:
            ours = ray.get_runtime_context().gcs_address
            assert ours != other_address
            assert os.environ[ADDRESS_ENV] == ours
            assert "object store stats" in memory_summary(stats_only=True)
        finally:
            stop_local_ray()
        assert ADDRESS_ENV not in os.environ  # as before the run
    finally:
        other.kill()
        other.wait(timeout=60)
