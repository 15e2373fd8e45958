"""Starting a local Ray for the policy actors, the same way for both drivers.

Two things the defaults get wrong for a training job:

- Ray starts its worker processes at niceness 15, so any other busy process on the node (a
  second job, a compile, a test's CPU burner) starves the actors that do all the work: on a
  2-core machine with two busy processes a run never reached its third step in 10 minutes.
  The actors run at the driver's priority instead (`RAY_worker_niceness=0`, the value Ray's own
  job manager sets for submitted jobs); a value already in the environment is kept.
- `ray.init` gives the raylet a fixed 30 s to register; on a loaded machine it can take longer
  ("The current node timed out during startup"), and a fresh start then succeeds.
- Code that asks Ray for "the" cluster without an address (NeMo-RL's `memory_tracker` calls
  `ray._private.internal_api.memory_summary()` every step) fails with "Found multiple active
  Ray instances" as soon as a second run is on the machine (a CI retry beside a developer's
  run). `RAY_ADDRESS` names this run's own cluster while it is up.

What starting Ray changes in this process (`RAY_ADDRESS`, the variables `ray.init` sets:
`RAY_AUTH_MODE`, `PYTHONBREAKPOINT`, ...; its SIGTERM handler) lasts until `stop_local_ray`,
which puts each back as it was: a caller that runs on (a test session, a notebook) finds its
process as before.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass
from typing import Any

from mcore_grpo.run_output import ray_runtime_env, route_ray_logger

NICENESS_ENV = "RAY_worker_niceness"  # RayConfig.worker_niceness, read by the raylet it starts
START_ATTEMPTS = 3
ADDRESS_ENV = "RAY_ADDRESS"


@dataclass(frozen=True)
class _Before:
    """What `start_local_ray` changed, as it was before: variables (None: unset), SIGTERM."""

    environ: dict[str, str | None]
    sigterm: Any


_SAVED: list[_Before] = []  # one per cluster start_local_ray started and stop_local_ray owes


def start_local_ray(workers: int, extra_cpus: int = 0) -> None:
    """`ray.init` for `workers` actors on this machine (no dashboard), retried if slow;
    `extra_cpus` more logical CPUs for actors that mostly wait (e.g. NeMo-RL's environments)."""
    environ = dict(os.environ)
    sigterm = signal.getsignal(signal.SIGTERM)
    os.environ.setdefault(NICENESS_ENV, "0")
    import ray

    route_ray_logger()
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            ray.init(
                # "local": a new instance; with no address ray.init attaches to any Ray already
                # running on the machine (another run's, a test's cluster) and then refuses
                # num_cpus ("When connecting to an existing cluster, num_cpus ... must not be
                # provided").
                address="local",
                num_cpus=max(workers, os.cpu_count() or 1) + extra_cpus,
                include_dashboard=False,
                log_to_driver=True,
                configure_logging=False,
                runtime_env=ray_runtime_env(),
            )
            os.environ[ADDRESS_ENV] = ray.get_runtime_context().gcs_address
            changed = {
                k for k in os.environ.keys() | environ.keys() if os.environ.get(k) != environ.get(k)
            }
            _SAVED.append(_Before({k: environ.get(k) for k in changed}, sigterm))
            return
        except Exception as err:
            if "timed out during startup" not in str(err) or attempt == START_ATTEMPTS:
                raise
            ray.shutdown()


def stop_local_ray() -> None:
    """`ray.shutdown()` of a cluster `start_local_ray` started, and what starting it changed
    (`RAY_ADDRESS`, `ray.init`'s variables and SIGTERM handler) as before."""
    import ray

    ray.shutdown()
    if not _SAVED:
        return
    before = _SAVED.pop()
    for name, value in before.environ.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    # Python sets handlers in the main thread only; None: one not set from Python.
    if before.sigterm is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, before.sigterm)
