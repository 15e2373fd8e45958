"""One home per setting: a default is written once, in the run config's sections
(`mcore_grpo.config`); the worker holds those sections, and its own scalar settings take their
defaults from them by reference.

Checked from the source (`ast`), not only from values: two literals that happen to be equal are
still two homes. And from values: a bare worker (`WorkerConfig()`, what tests and benchmarks
build) is configured as a default run would configure it (`worker_config(RunConfig())`).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from typing import Any

from mcore_grpo.config import grpo, loss, policy, schema, task
from mcore_grpo.config.schema import RunConfig
from mcore_grpo.grpo.nemo_rl.source import require_nemo_rl
from mcore_grpo.grpo.ranks.messages import TaskTokens
from mcore_grpo.grpo.ranks.worker_settings import worker_config
from mcore_grpo.nemo_rl_driver.config import EXAMPLE_CONFIG, cpu_overrides
from mcore_grpo.worker import config as worker_module
from mcore_grpo.worker.config import WorkerConfig

# What the worker holds that a run resolves rather than reads (the model over the task's
# vocabulary, the parallel layout with the cluster's collective timeout, the schedule in GRPO
# steps): built by `worker_settings`, with the worker's own defaults for a bare worker.
RESOLVED = {"model", "parallel", "schedule"}


def _default_expressions(cls: type) -> dict[str, ast.expr]:
    """Field name -> the expression of its default, as written in `cls`'s source."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0]
    assert isinstance(body, ast.ClassDef)
    return {
        node.target.id: node.value
        for node in body.body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and node.value is not None
    }


def _section_classes() -> set[type]:
    """Every dataclass the run config's modules declare."""
    return {
        obj
        for module in (grpo, loss, policy, schema, task)
        for obj in vars(module).values()
        if isinstance(obj, type)
        and dataclasses.is_dataclass(obj)
        and obj.__module__ == module.__name__
    }


def test_the_worker_declares_no_default_of_its_own_for_a_run_setting() -> None:
    sections = _section_classes()
    written = _default_expressions(WorkerConfig)
    for f in dataclasses.fields(WorkerConfig):
        if f.name in RESOLVED:
            continue
        if f.default_factory is not dataclasses.MISSING:  # a section object, as it is
            assert f.default_factory in sections, f"WorkerConfig.{f.name}: not a config section"
            continue
        expression = written[f.name]
        assert isinstance(expression, ast.Attribute) and isinstance(expression.value, ast.Name), (
            f"WorkerConfig.{f.name} = {ast.unparse(expression)}: a literal; take the default "
            "from the run config's section (Section.field)"
        )
        owner = getattr(worker_module, expression.value.id)
        assert owner in sections and expression.attr in {g.name for g in dataclasses.fields(owner)}


def test_a_bare_worker_is_configured_as_a_default_run() -> None:
    run = worker_config(RunConfig(), TaskTokens(vocab_size=64, pad_id=0, eos_id=1))
    bare = WorkerConfig()
    differ = {
        f.name: (getattr(bare, f.name), getattr(run, f.name))
        for f in dataclasses.fields(WorkerConfig)
        if f.name not in RESOLVED and getattr(bare, f.name) != getattr(run, f.name)
    }
    assert not differ, f"bare worker vs default run: {differ}"


def test_the_sections_the_worker_holds_are_the_run_configs_objects() -> None:
    config = RunConfig()
    run = worker_config(config, TaskTokens(vocab_size=64, pad_id=0, eos_id=1))
    mc = config.policy.megatron_cfg
    assert run.optimizer is mc.optimizer
    assert run.ddp is mc.distributed_data_parallel_config
    assert run.loss is config.loss_fn


def _field_paths(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf setting of a dataclass tree: dotted key -> value."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            out |= _field_paths(value, key + ".")
        else:
            out[key] = value
    return out


def _leaves(tree: dict[str, Any], prefix: str = "") -> set[str]:
    return {
        k
        for key, value in tree.items()
        for k in (
            _leaves(value, f"{prefix}{key}.")
            if isinstance(value, dict) and value
            else {f"{prefix}{key}"}
        )
    }


def _nemo_rl_example_keys() -> set[str]:
    """The dotted keys of NeMo-RL's example Megatron GRPO config, loaded from NeMo-RL's own
    file as its driver loads it: the oracle for which keys exist."""
    from nemo_rl.utils.config import load_config, register_omegaconf_resolvers
    from omegaconf import OmegaConf

    register_omegaconf_resolvers()
    cfg = load_config(require_nemo_rl() / EXAMPLE_CONFIG)
    return _leaves(OmegaConf.to_container(cfg, resolve=False))  # type: ignore[arg-type]


# NeMo-RL keys the NeMo-RL driver sets that are no setting of ours: what a CPU run needs
# switched off, or pointed at the run's directory and workers.
CPU_ONLY = {
    "grpo.max_num_epochs",
    "policy.make_sequence_length_divisible_by",
    "policy.sequence_packing.enabled",
    "policy.dynamic_batching.enabled",
    "policy.generation.top_k",
    "policy.generation.colocated.enabled",
    "policy.megatron_cfg.apply_rope_fusion",
    "data.shuffle",
    "data.num_workers",
    "logger.log_dir",
    "logger.tensorboard_enabled",
    "logger.wandb_enabled",
    "logger.mlflow_enabled",
    "logger.swanlab_enabled",
    "logger.monitor_gpus",
    "checkpointing.checkpoint_dir",
    "checkpointing.metric_name",
}
# Our settings the driver passes as what they resolve to: the advantage's (grpo.adv_estimator.*
# over grpo.*), validation off (its sampling is greedy, the worker's is not), the schedule's
# weight decays (NeMo-RL's interpolations), a save period of 0 (never) as max_num_steps, the
# workers per node, and NeMo-RL's `megatron` generation backend (ours is its CPU form).
RESOLVED_FOR_NEMO_RL = {
    "cluster.gpus_per_node",
    "policy.generation.backend",
    "grpo.normalize_rewards",
    "grpo.use_leave_one_out_baseline",
    "grpo.val_period",
    "grpo.val_at_start",
    "grpo.val_at_end",
    "policy.megatron_cfg.scheduler.start_weight_decay",
    "policy.megatron_cfg.scheduler.end_weight_decay",
    "policy.megatron_cfg.scheduler.weight_decay_incr_style",
    "checkpointing.save_period",
}
# Ours unset (None) means NeMo-RL's own interpolation of another key: left to it.
LEFT_TO_NEMO_RL = {
    "grpo.adv_estimator.normalize_rewards",
    "grpo.adv_estimator.use_leave_one_out_baseline",
}


def test_every_setting_both_configs_have_reaches_nemo_rl_with_its_value(tmp_path: Any) -> None:
    """Every field of ours whose key NeMo-RL's example config has is passed with our value
    (derived, so a field added to a section reaches NeMo-RL without a second list); every
    override is a key NeMo-RL has; what is not ours is a CPU switch."""
    keys = _nemo_rl_example_keys()
    config = RunConfig()
    ours = _field_paths(config)
    overrides = dict(o.split("=", 1) for o in cpu_overrides(config, 1, tmp_path, keys))
    assert set(overrides) <= keys, set(overrides) - keys
    assert not CPU_ONLY & set(ours) and set(overrides) - set(ours) == CPU_ONLY
    shared = (set(ours) & keys) - LEFT_TO_NEMO_RL
    assert len(shared) > 60 and shared <= set(overrides), shared - set(overrides)
    for key in shared - RESOLVED_FOR_NEMO_RL:
        expected = ours[key]
        text = "null" if expected is None else str(expected).lower()
        assert overrides[key].strip("'").lower() == text, (
            f"{key}={overrides[key]}, ours {expected!r}"
        )


# ParallelConfig fields whose default differs from the run config's on purpose (said in
# worker/config.py): ETP None is megatron-core's own (= TP); the timeout is the cluster's in a
# run and no field of policy.megatron_cfg.
PARALLEL_OWN = {"expert_tensor_parallel_size", "distributed_timeout_minutes"}


def test_the_workers_parallel_sizes_take_the_run_configs_defaults() -> None:
    from mcore_grpo.config.policy import MegatronSection
    from mcore_grpo.worker.config import ParallelConfig

    written = _default_expressions(ParallelConfig)
    megatron = {f.name for f in dataclasses.fields(MegatronSection)}
    for f in dataclasses.fields(ParallelConfig):
        if f.name in PARALLEL_OWN:
            continue
        expression = written[f.name]
        assert ast.unparse(expression) == f"MegatronSection.{f.name}", (
            f"ParallelConfig.{f.name} = {ast.unparse(expression)}: take the default from "
            f"MegatronSection.{f.name}"
        )
        assert f.name in megatron
