"""upstream_pytest.nemo_rl: the `ray.init` NeMo-RL's own test sessions get (a private
cluster, no dashboard, a slow raylet retried), checked against a recording stand-in for
`ray.init` (no cluster is started here; `tools/patches verify NeMo-RL` runs the real one)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from typing import Any

import pytest
from mcore_grpo.grpo.nemo_rl import source
from upstream_pytest.nemo_rl import (
    PLACEMENT_RETRIES_VAR,
    SETUP_HOOK,
    START_ATTEMPTS,
    placement_fails_fast,
    private_ray_init,
)


class RecordingInit:
    """Stands in for `ray.init`: records each call, fails the first `failures` of them."""

    def __init__(self, failures: int = 0, message: str = "") -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.failures, self.message = failures, message

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        self.calls.append((args, kwargs))
        if len(self.calls) <= self.failures:
            raise Exception(self.message)
        return "context"


def test_attaching_to_a_running_cluster_is_refused_as_no_cluster() -> None:
    """NeMo-RL's init_ray catches exactly ConnectionError and then starts its own cluster."""
    real = RecordingInit()
    with pytest.raises(ConnectionError, match="private Ray cluster"):
        private_ray_init(real)(address="auto", include_dashboard=False)
    assert real.calls == []


def test_a_new_cluster_is_local_and_without_dashboard() -> None:
    real = RecordingInit()
    assert private_ray_init(real)(include_dashboard=True, resources={"nrl_tag_ALL": 1}) == "context"
    hook = {"worker_process_setup_hook": SETUP_HOOK}
    assert real.calls == [
        (
            (),
            {
                "include_dashboard": False,
                "resources": {"nrl_tag_ALL": 1},
                "address": "local",
                "runtime_env": hook,
            },
        )
    ]


def test_the_actors_setup_hook_joins_the_callers_runtime_env() -> None:
    """NeMo-RL's own runtime_env keys are kept; the hook is added (a caller's own hook wins)."""
    real = RecordingInit()
    private_ray_init(real)(runtime_env={"env_vars": {"A": "1"}})
    assert real.calls[0][1]["runtime_env"] == {
        "env_vars": {"A": "1"},
        "worker_process_setup_hook": SETUP_HOOK,
    }
    theirs = RecordingInit()
    private_ray_init(theirs)(runtime_env={"worker_process_setup_hook": "pkg.hook"})
    assert theirs.calls[0][1]["runtime_env"] == {"worker_process_setup_hook": "pkg.hook"}
    # The hook names a function that exists, imported by module path as Ray does.
    module, _, name = SETUP_HOOK.rpartition(".")
    assert callable(getattr(importlib.import_module(module), name))


def test_a_slow_raylet_is_retried_and_other_errors_are_not() -> None:
    slow = RecordingInit(1, "The current node timed out during startup. This could happen ...")
    assert private_ray_init(slow)() == "context"
    assert len(slow.calls) == 2
    never = RecordingInit(START_ATTEMPTS, "The current node timed out during startup.")
    with pytest.raises(Exception, match="timed out during startup"):
        private_ray_init(never)()
    assert len(never.calls) == START_ATTEMPTS
    other = RecordingInit(1, "Cannot include dashboard with missing packages")
    with pytest.raises(Exception, match="dashboard"):
        private_ray_init(other)()
    assert len(other.calls) == 1


ACTORS_SCRIPT = """
from nemo_rl.distributed import ray_actor_environment_registry as registry
from nemo_rl.distributed.virtual_cluster import PY_EXECUTABLES

from upstream_pytest.nemo_rl import actors_on_this_interpreter

v2 = "nemo_rl.models.policy.workers.dtensor_policy_worker_v2.DTensorPolicyWorkerV2"
assert registry.ACTOR_ENVIRONMENT_REGISTRY[v2].startswith("uv run"), registry.ACTOR_ENVIRONMENT_REGISTRY[v2]
actors_on_this_interpreter()
assert set(registry.ACTOR_ENVIRONMENT_REGISTRY.values()) == {PY_EXECUTABLES.SYSTEM}
assert PY_EXECUTABLES.AUTOMODEL == PY_EXECUTABLES.FSDP == PY_EXECUTABLES.SYSTEM
print("ACTORS OK")
"""


@pytest.mark.nemo_rl
@pytest.mark.skipif(
    not source.is_available(), reason=f"NeMo-RL is not installed (no {source.CHECKOUT})"
)
def test_every_nemo_rl_actor_runs_on_this_interpreter() -> None:
    """NeMo-RL maps actor classes to `uv run --extra ...` of its own project, which this
    environment cannot start; the plugin points them all at the running interpreter (in a
    subprocess: it changes NeMo-RL's module state)."""
    run = subprocess.run(
        [sys.executable, "-c", ACTORS_SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ACTORS OK" in run.stdout


def _placement_tries(monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[float], str]:
    """NeMo-RL's own retry loop (`RayVirtualCluster._init_placement_groups`) against a cluster
    that never holds the request: how often it tried, what it slept, what it raised."""
    from nemo_rl.distributed import virtual_cluster

    tries: list[int] = []
    slept: list[float] = []

    def never_fits(*_: Any) -> list[Any]:
        tries.append(1)
        raise virtual_cluster.ResourceInsufficientError("needs 1 GPU, the cluster has 0")

    cluster = object.__new__(virtual_cluster.RayVirtualCluster)
    cluster._node_placement_groups = None
    cluster.placement_group_strategy = "SPREAD"
    monkeypatch.setattr(cluster, "_create_placement_groups_internal", never_fits)
    monkeypatch.setattr(virtual_cluster.time, "sleep", slept.append)
    with pytest.raises(virtual_cluster.ResourceInsufficientError) as raised:
        cluster._init_placement_groups()
    return len(tries), slept, str(raised.value)


@pytest.mark.nemo_rl
@pytest.mark.skipif(
    not source.is_available(), reason=f"NeMo-RL is not installed (no {source.CHECKOUT})"
)
def test_a_placement_the_cluster_cannot_hold_fails_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unset, NeMo-RL tries 6 times and sleeps 63 s before the same error; with the plugin's
    setting it tries once; a value the caller set is kept."""
    # setenv first, so that monkeypatch records the variable's state before the test and puts
    # it back (a delenv of an unset variable records nothing; placement_fails_fast sets it).
    monkeypatch.setenv(PLACEMENT_RETRIES_VAR, "")
    monkeypatch.delenv(PLACEMENT_RETRIES_VAR)
    tries, slept, error = _placement_tries(monkeypatch)
    assert (tries, sum(slept)) == (6, 63)
    assert "Maximum number of retries reached (6)" in error

    placement_fails_fast()
    tries, slept, error = _placement_tries(monkeypatch)
    assert (tries, sum(slept)) == (1, 1)
    assert "Maximum number of retries reached (1)" in error

    monkeypatch.setenv(PLACEMENT_RETRIES_VAR, "3")
    placement_fails_fast()
    assert _placement_tries(monkeypatch)[0] == 3
