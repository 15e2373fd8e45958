"""mcore_grpo.upstream_nemo_rl: the `ray.init` NeMo-RL's own test sessions get (a private
cluster, no dashboard, a slow raylet retried), checked against a recording stand-in for
`ray.init` (no cluster is started here; `tools/patches verify NeMo-RL` runs the real one)."""

from __future__ import annotations

from typing import Any

import pytest
from mcore_grpo.upstream_nemo_rl import START_ATTEMPTS, private_ray_init


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
    assert real.calls == [
        ((), {"include_dashboard": False, "resources": {"nrl_tag_ALL": 1}, "address": "local"})
    ]


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
