"""A rank tears down only what it made: a caller's process group and parallel state (a test
session's, a notebook's) outlive the run, and a rank that fails to start leaves the process as
it found it, saying whether a rerun would fail the same way."""

from __future__ import annotations

import pytest
import torch.distributed as dist
from mcore_grpo.config.loader import load_config
from mcore_grpo.grpo.ranks.messages import TaskTokens
from mcore_grpo.grpo.ranks.runner import LocalRunner, WorkerFailed
from mcore_grpo.grpo.tasks.task import build_task

from tests.support.parallel import Layout, current_layout, parallel_layout

pytestmark = pytest.mark.cpu_only(reason="runs the cpu-tiny preset (policy.device=cpu)")


def _config_and_tokens(short: list[str]) -> tuple[object, TaskTokens]:
    config = load_config(overrides=short)
    task = build_task(config.task.name)
    return config, TaskTokens(task.vocab_size, task.pad_id, task.eos_id)


def test_a_callers_group_and_parallel_state_outlive_the_runner(
    world1: None, short: list[str]
) -> None:
    config, tokens = _config_and_tokens(short)
    with parallel_layout(seed=0):
        group = dist.group.WORLD
        runner = LocalRunner(config, tokens)  # type: ignore[arg-type]
        runner.shutdown()
        assert dist.is_initialized() and dist.group.WORLD is group
        assert current_layout() == Layout(tp=1, pp=1, ep=1, etp=1)


def test_a_rank_that_fails_to_start_says_a_rerun_repeats_it_and_leaves_all_as_found(
    world1: None, short: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker fails after it set up megatron-core's parallel state (as an import of a layer
    class the installed tree lacks would, while the model is built): the rank tears it down."""
    import mcore_grpo.worker.policy_worker as policy_worker
    from mcore_grpo.worker.parallel import init_model_parallel

    def half_built(config: object, **_kwargs: object) -> None:
        init_model_parallel(config)  # type: ignore[arg-type]
        raise ImportError("cannot import name 'GatedDeltaNet2' from 'megatron.core.ssm'")

    monkeypatch.setattr(policy_worker, "MegatronPolicyWorker", half_built)
    config, tokens = _config_and_tokens(short)
    with parallel_layout(None):
        with pytest.raises(WorkerFailed, match="failed to start: ImportError") as raised:
            LocalRunner(config, tokens)  # type: ignore[arg-type]
        assert raised.value.repeats == "ImportError"
        assert dist.is_initialized()
        assert current_layout() is None
