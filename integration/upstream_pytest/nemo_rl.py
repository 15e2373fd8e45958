"""pytest plugin for NeMo-RL's own unit tests on this machine, loaded after
`upstream_pytest.cpu` (`args` of [NeMo-RL] in patches/upstream-tests.toml):

    cd <NeMo-RL tree> && python -m pytest -p upstream_pytest.cpu \
        -p upstream_pytest.nemo_rl tests/unit/...

NeMo-RL's `tests/unit/conftest.py` starts one Ray cluster per session (autouse
`init_ray_cluster` -> `nemo_rl.distributed.virtual_cluster.init_ray`). Three things about that
do not hold here, and each is changed at `ray.init`, nothing in NeMo-RL's tree:

- `init_ray` first tries `ray.init(address="auto")`, which attaches to whatever Ray cluster is
  already running on the machine (a training run's, another test session's) and then runs the
  tests on it. Here that call raises the `ConnectionError` Ray raises when no cluster runs, so
  `init_ray` takes its own path to a new local cluster: every session gets a private one.
- The new cluster asks for the dashboard (`include_dashboard=True`), whose packages
  (`aiohttp_cors`, `opencensus`, ...) are not installed: `Exception: Cannot include dashboard
  with missing packages`. It starts without it (nothing in the unit tests reads it).
- Ray gives the raylet a fixed 30 s to register; on a loaded 2-core machine it can take longer
  ("The current node timed out during startup") and a fresh start then succeeds: retried, as
  `mcore_grpo.grpo.cluster.local_ray.start_local_ray` does for our runs.

NeMo-RL starts each Ray actor under `uv run --extra <extra> --directory <git root>`
(`PY_EXECUTABLES`, mapped per actor class in `ray_actor_environment_registry`); here NeMo-RL is
installed into this project's environment, which has no such extras, so every actor process dies
at start ("Extra `automodel` is not defined") and each actor test waits for a worker that never
registers. NeMo-RL's own switch, `NEMO_RL_PY_EXECUTABLES_SYSTEM=1`, moves only the
vLLM/SGLang/Megatron/TRT-LLM actors; the plugin points every `PY_EXECUTABLES` entry and every
registered actor at the running interpreter.

A placement group the private cluster cannot hold (a test asking for GPUs on this CPU machine)
fails with NeMo-RL's `ResourceInsufficientError` after `NRL_VIRTUAL_CLUSTER_MAX_RETRIES` tries
(default 6) spaced 1, 2, 4, ... 32 s: a 63 s wait per such test for nodes that never join a
local cluster whose resources are fixed at start (83.5 s -> 21.9 s for
`test_reward_model_environment_preprocess_data[1]`, once per gate tree). The plugin sets that
knob, NeMo-RL's own, to 1 unless the caller set it: the test fails with the same error, without
the wait.

Also: nemo_automodel 0.4.0's `lora_kernel` module raises at import under Triton 3.9 (this
environment; NeMo-RL's CI has 3.8), which fails every NeMo-RL module that imports automodel. It
is imported first on its own no-Triton path, as our NeMo-RL driver does
(`mcore_grpo.grpo.nemo_rl.automodel_compat`, which says why), in the test process and, through
the cluster's `worker_process_setup_hook`, in every actor process: an actor of
`tests/unit/models/policy` that imports `nemo_rl.models.policy.utils` died at import without it,
and the full gate hung waiting for it.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import pytest
from mcore_grpo.grpo.nemo_rl.automodel_compat import prepare_automodel

START_ATTEMPTS = 3
PLACEMENT_RETRIES_VAR = "NRL_VIRTUAL_CLUSTER_MAX_RETRIES"
PLACEMENT_RETRIES = "1"  # a private local cluster gains no nodes: one try says it all
SETUP_HOOK = "mcore_grpo.grpo.nemo_rl.automodel_compat.prepare_automodel"
_MARK = "_mcore_grpo_private_cluster"


def private_ray_init(real_init: Any) -> Any:
    """`ray.init` that never attaches to a running cluster, starts no dashboard, and retries a
    raylet that registers slowly."""

    @functools.wraps(real_init)
    def init(*args: Any, **kwargs: Any) -> Any:
        address = kwargs.get("address", args[0] if args else None)
        if address == "auto":
            raise ConnectionError(
                "upstream-nemo-rl: each test session starts a private Ray cluster; not "
                "attaching to one already running on this machine"
            )
        kwargs["include_dashboard"] = False
        if address is None and not args:
            kwargs["address"] = "local"
        # Every worker process of the cluster (the actors) imports automodel's LoRA kernel the
        # safe way too, not only this test process: an actor importing NeMo-RL's policy
        # modules otherwise dies at import and its test waits for it forever.
        runtime_env = dict(kwargs.get("runtime_env") or {})
        runtime_env.setdefault("worker_process_setup_hook", SETUP_HOOK)
        kwargs["runtime_env"] = runtime_env
        import ray

        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                context = real_init(*args, **kwargs)
            except Exception as err:
                if "timed out during startup" not in str(err) or attempt == START_ATTEMPTS:
                    raise
                ray.shutdown()
                continue
            # Processes the tests start (Ray's own CLI, subprocesses) that ask for "the"
            # cluster find this session's, not another on the machine.
            if ray.is_initialized():
                os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
            return context
        raise AssertionError("unreachable: the last attempt returns or raises")

    setattr(init, _MARK, True)
    return init


def actors_on_this_interpreter() -> None:
    """Every NeMo-RL actor environment -> the running interpreter (NeMo-RL absent: nothing)."""
    try:
        from nemo_rl.distributed import ray_actor_environment_registry as registry
        from nemo_rl.distributed.virtual_cluster import PY_EXECUTABLES
    except ImportError:
        return
    system = PY_EXECUTABLES.SYSTEM
    for name, value in list(vars(PY_EXECUTABLES).items()):
        if isinstance(value, str) and value.startswith("uv run"):
            setattr(PY_EXECUTABLES, name, system)
    for actor in registry.ACTOR_ENVIRONMENT_REGISTRY:
        registry.ACTOR_ENVIRONMENT_REGISTRY[actor] = system


def placement_fails_fast() -> None:
    """One placement-group try per request, unless the caller chose; called before any cluster
    starts, so its raylet and every actor inherit it."""
    os.environ.setdefault(PLACEMENT_RETRIES_VAR, PLACEMENT_RETRIES)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    placement_fails_fast()
    prepare_automodel()
    actors_on_this_interpreter()
    import ray

    if not getattr(ray.init, _MARK, False):
        ray.init = private_ray_init(ray.init)


def pytest_report_header(config: pytest.Config) -> str:
    return (
        "upstream-nemo-rl: a private Ray cluster per session (no dashboard, "
        f"{PLACEMENT_RETRIES_VAR}={os.environ.get(PLACEMENT_RETRIES_VAR)}), "
        "nemo_automodel's lora_kernel on its torch path"
    )
