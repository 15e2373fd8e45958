"""NeMo-RL's `MasterConfig`: its example Megatron GRPO config plus CPU overrides from our run.

Loaded the way ``examples/run_grpo.py`` loads it: `load_config` (``defaults:`` inheritance)
of ``examples/configs/grpo_math_1B_megatron.yaml``, then Hydra ``key=value`` overrides through
NeMo-RL's `parse_hydra_overrides`, resolved, validated as `MasterConfig`, and the generation
section completed by `configure_generation_config` (pad id, EOS stop token). The overrides
(`cpu_overrides`) carry every setting our run config (`mcore_grpo.config.schema.RunConfig`)
shares with NeMo-RL, derived from the two schemas (a field whose dotted key is a key of
NeMo-RL's config), so both drivers train the same problem with the same numbers; the rest
switches off what needs a GPU cluster, a hub model or a dataset download (sequence packing,
validation, GPU monitoring, wandb).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from mcore_grpo.config.nemo_rl_keys import shared_settings
from mcore_grpo.config.schedule import lr_schedule
from mcore_grpo.config.schema import RunConfig
from mcore_grpo.grpo.nemo_rl.source import require_nemo_rl

EXAMPLE_CONFIG = Path("examples") / "configs" / "grpo_math_1B_megatron.yaml"


def _value(value: Any) -> str:
    """A Python value as a Hydra override value (a string with characters Hydra's grammar
    reads, such as ':' in "DD:HH:MM:SS", quoted)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and not re.fullmatch(r"[\w./+-]*", value):
        return f"'{value}'"
    return str(value)


# What a CPU run of NeMo-RL's example config switches off or sets that is no setting of ours:
# sequence packing and dynamic batching (need CUDA kernels), RoPE fusion, the generation
# engine's separate placement, data loader workers, and every logger but tensorboard.
CPU_SWITCHES: dict[str, Any] = {
    "grpo.max_num_epochs": 1,
    "policy.sequence_packing.enabled": False,
    "policy.dynamic_batching.enabled": False,
    "policy.generation.top_k": None,
    "policy.generation.colocated.enabled": True,
    "policy.megatron_cfg.apply_rope_fusion": False,
    "data.shuffle": False,
    "data.num_workers": 0,
    "logger.tensorboard_enabled": True,
    "logger.wandb_enabled": False,
    "logger.mlflow_enabled": False,
    "logger.swanlab_enabled": False,
    "logger.monitor_gpus": False,
    "checkpointing.metric_name": None,
}


def cpu_overrides(
    config: RunConfig, workers: int, output_dir: Path, nemo_rl_keys: Collection[str]
) -> list[str]:
    """Hydra overrides of NeMo-RL's example config for this run: every setting both configs
    have, derived (`shared_settings`: our field's value under its NeMo-RL key), then what
    NeMo-RL reads in another form (`_resolved`), the CPU switches and the run's directories."""
    settings: dict[str, Any] = {
        **shared_settings(config, nemo_rl_keys),
        **_resolved(config, workers),
        **CPU_SWITCHES,
        "logger.log_dir": output_dir / "logs",
        "checkpointing.checkpoint_dir": output_dir / "checkpoints",
    }
    return [f"{key}={_value(value)}" for key, value in settings.items()]


def _resolved(config: RunConfig, workers: int) -> dict[str, Any]:
    """Our settings NeMo-RL takes in another form: the advantage's flags as they resolve
    (grpo.adv_estimator.* over grpo.*), validation off (it samples greedily; the worker's
    sampler has no greedy mode), the schedule's weight decays (NeMo-RL's interpolations), a
    save period of 0 (never) as the run's length, the workers per node (grpo_train divides
    throughput by num_nodes x gpus_per_node), NeMo-RL's `megatron` generation backend (ours is
    its CPU form), and sequences divisible by the TP size."""
    g, p = config.grpo, config.policy
    schedule = lr_schedule(config)
    return {
        "grpo.normalize_rewards": g.advantage_normalize_rewards,
        "grpo.use_leave_one_out_baseline": g.advantage_leave_one_out,
        "grpo.val_period": 0,
        "grpo.val_at_start": False,
        "grpo.val_at_end": False,
        "policy.megatron_cfg.scheduler.start_weight_decay": schedule.start_wd,
        "policy.megatron_cfg.scheduler.end_weight_decay": schedule.end_wd,
        "policy.megatron_cfg.scheduler.weight_decay_incr_style": schedule.wd_incr_style,
        "checkpointing.save_period": config.checkpointing.save_period or g.max_num_steps,
        "cluster.gpus_per_node": workers // config.cluster.num_nodes,
        "policy.generation.backend": "megatron",
        "policy.make_sequence_length_divisible_by": p.megatron_cfg.tensor_model_parallel_size,
    }


def nemo_rl_keys(cfg: dict[str, Any], prefix: str = "") -> set[str]:
    """The dotted keys of NeMo-RL's config (a nested dict, interpolations unresolved)."""
    keys: set[str] = set()
    for key, value in cfg.items():
        if isinstance(value, dict) and value:
            keys |= nemo_rl_keys(value, f"{prefix}{key}.")
        else:
            keys.add(f"{prefix}{key}")
    return keys


def master_config(config: RunConfig, workers: int, output_dir: Path, tokenizer: Any) -> Any:
    """NeMo-RL's validated `MasterConfig` for this run."""
    root = require_nemo_rl()
    from nemo_rl.algorithms.grpo import MasterConfig
    from nemo_rl.models.generation import configure_generation_config
    from nemo_rl.utils.config import (
        load_config,
        parse_hydra_overrides,
        register_omegaconf_resolvers,
    )
    from omegaconf import OmegaConf

    register_omegaconf_resolvers()
    cfg = load_config(root / EXAMPLE_CONFIG)
    keys = nemo_rl_keys(OmegaConf.to_container(cfg, resolve=False))  # type: ignore[arg-type]
    cfg = parse_hydra_overrides(cfg, cpu_overrides(config, workers, output_dir, keys))
    master = MasterConfig(**OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
    master.policy["generation"] = configure_generation_config(
        master.policy["generation"], tokenizer
    )
    return master
