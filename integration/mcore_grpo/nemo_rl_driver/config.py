"""NeMo-RL's `MasterConfig`: its example Megatron GRPO config plus CPU overrides from our run.

Loaded the way ``examples/run_grpo.py`` loads it: `load_config` (``defaults:`` inheritance)
of ``examples/configs/grpo_math_1B_megatron.yaml``, then Hydra ``key=value`` overrides through
NeMo-RL's `parse_hydra_overrides`, resolved, validated as `MasterConfig`, and the generation
section completed by `configure_generation_config` (pad id, EOS stop token). The overrides
(`cpu_overrides`) carry every setting our run config (`mcore_grpo.config.schema.RunConfig`)
shares with NeMo-RL, so both drivers train the same problem with the same numbers; the rest
switches off what needs a GPU cluster, a hub model or a dataset download (sequence packing,
validation, GPU monitoring, wandb).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcore_grpo.config.schedule import lr_schedule
from mcore_grpo.config.schema import RunConfig
from mcore_grpo.grpo.nemo_rl.source import require_nemo_rl

EXAMPLE_CONFIG = Path("examples") / "configs" / "grpo_math_1B_megatron.yaml"


def _value(value: Any) -> str:
    """A Python value as a Hydra override value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def cpu_overrides(config: RunConfig, workers: int, output_dir: Path) -> list[str]:
    """Hydra overrides of NeMo-RL's example config for this run (printed by the CLI)."""
    settings: dict[str, Any] = {
        **_grpo_settings(config),
        **_loss_settings(config),
        **_policy_settings(config),
        **_run_settings(config, workers, output_dir),
    }
    return [f"{key}={_value(value)}" for key, value in settings.items()]


def _grpo_settings(config: RunConfig) -> dict[str, Any]:
    """``grpo.*``: the batch, the advantage and the reward shaping, as our run has them."""
    g = config.grpo
    return {
        "grpo.num_prompts_per_step": g.num_prompts_per_step,
        "grpo.num_generations_per_prompt": g.num_generations_per_prompt,
        "grpo.max_num_steps": g.max_num_steps,
        "grpo.max_num_epochs": 1,
        "grpo.seed": g.seed,
        "grpo.normalize_rewards": g.advantage_normalize_rewards,
        "grpo.use_leave_one_out_baseline": g.advantage_leave_one_out,
        "grpo.overlong_filtering": g.overlong_filtering,
        "grpo.reward_shaping.enabled": g.reward_shaping.enabled,
        "grpo.reward_shaping.overlong_buffer_length": g.reward_shaping.overlong_buffer_length,
        "grpo.reward_shaping.overlong_buffer_penalty": g.reward_shaping.overlong_buffer_penalty,
        "grpo.reward_shaping.max_response_length": g.reward_shaping.max_response_length,
        "grpo.reward_shaping.stop_properly_penalty_coef": (
            g.reward_shaping.stop_properly_penalty_coef
        ),
        # Validation samples greedily; the worker's sampler has no greedy mode.
        "grpo.val_period": 0,
        "grpo.val_at_start": False,
        "grpo.val_at_end": False,
    }


def _loss_settings(config: RunConfig) -> dict[str, Any]:
    """``loss_fn.*``: the same clipped PG loss and KL penalty as our `loss_fn` section."""
    loss = config.loss_fn
    return {
        "loss_fn.reference_policy_kl_penalty": loss.reference_policy_kl_penalty,
        "loss_fn.reference_policy_kl_type": loss.reference_policy_kl_type,
        "loss_fn.kl_input_clamp_value": loss.kl_input_clamp_value,
        "loss_fn.kl_output_clamp_value": loss.kl_output_clamp_value,
        "loss_fn.ratio_clip_min": loss.ratio_clip_min,
        "loss_fn.ratio_clip_max": loss.ratio_clip_max,
        "loss_fn.ratio_clip_c": loss.ratio_clip_c,
        "loss_fn.token_level_loss": loss.token_level_loss,
    }


def _policy_settings(config: RunConfig) -> dict[str, Any]:
    """``policy.*``: the model, batches, sampling, parallelism and optimizer of our run, with
    what needs a GPU (sequence packing, dynamic batching, RoPE fusion) switched off."""
    p = config.policy
    mc = p.megatron_cfg
    schedule = lr_schedule(config)
    return {
        "policy.model_name": p.model_name,
        "policy.precision": p.precision,
        "policy.train_global_batch_size": p.train_global_batch_size,
        "policy.train_micro_batch_size": p.train_micro_batch_size,
        "policy.logprob_batch_size": p.logprob_batch_size,
        "policy.max_total_sequence_length": p.max_total_sequence_length,
        "policy.max_grad_norm": p.max_grad_norm,
        "policy.make_sequence_length_divisible_by": mc.tensor_model_parallel_size,
        "policy.sequence_packing.enabled": False,
        "policy.dynamic_batching.enabled": False,
        "policy.generation.backend": "megatron",
        "policy.generation.max_new_tokens": p.generation.max_new_tokens,
        "policy.generation.temperature": p.generation.temperature,
        "policy.generation.top_p": p.generation.top_p,
        "policy.generation.top_k": None,
        "policy.generation.colocated.enabled": True,
        "policy.megatron_cfg.tensor_model_parallel_size": mc.tensor_model_parallel_size,
        "policy.megatron_cfg.pipeline_model_parallel_size": mc.pipeline_model_parallel_size,
        "policy.megatron_cfg.apply_rope_fusion": False,
        "policy.megatron_cfg.optimizer.lr": mc.optimizer.lr,
        "policy.megatron_cfg.optimizer.weight_decay": mc.optimizer.weight_decay,
        "policy.megatron_cfg.optimizer.min_lr": mc.optimizer.min_lr,
        "policy.megatron_cfg.scheduler.lr_warmup_iters": mc.scheduler.lr_warmup_iters,
        "policy.megatron_cfg.scheduler.lr_warmup_init": mc.scheduler.lr_warmup_init,
        "policy.megatron_cfg.scheduler.lr_decay_style": mc.scheduler.lr_decay_style,
        "policy.megatron_cfg.scheduler.lr_decay_iters": mc.scheduler.lr_decay_iters,
        "policy.megatron_cfg.scheduler.start_weight_decay": schedule.start_wd,
        "policy.megatron_cfg.scheduler.end_weight_decay": schedule.end_wd,
        "policy.megatron_cfg.scheduler.weight_decay_incr_style": schedule.wd_incr_style,
        "policy.megatron_cfg.optimizer.use_distributed_optimizer": mc.optimizer.use_distributed_optimizer,
    }


def _run_settings(config: RunConfig, workers: int, output_dir: Path) -> dict[str, Any]:
    """``data.*``, ``cluster.*``, ``logger.*``, ``checkpointing.*``: where the run runs and
    what it writes, as ours; wandb, mlflow, swanlab and GPU monitoring switched off."""
    g, ckpt = config.grpo, config.checkpointing
    settings: dict[str, Any] = {
        "data.shuffle": False,
        "data.num_workers": 0,
        # Workers per node: grpo_train divides throughput by num_nodes x gpus_per_node.
        "cluster.gpus_per_node": workers // config.cluster.num_nodes,
        "cluster.num_nodes": config.cluster.num_nodes,
        "logger.log_dir": output_dir / "logs",
        "logger.tensorboard_enabled": True,
        "logger.wandb_enabled": False,
        "logger.mlflow_enabled": False,
        "logger.swanlab_enabled": False,
        "logger.monitor_gpus": False,
        "checkpointing.enabled": ckpt.enabled,
        "checkpointing.checkpoint_dir": output_dir / "checkpoints",
        "checkpointing.save_period": ckpt.save_period or g.max_num_steps,
        "checkpointing.metric_name": None,
        "checkpointing.keep_top_k": ckpt.keep_top_k,
        "checkpointing.save_consolidated": ckpt.save_consolidated,
    }
    if ckpt.checkpoint_must_save_by is not None:  # NeMo-RL's own key
        settings["checkpointing.checkpoint_must_save_by"] = (
            f"'{ckpt.checkpoint_must_save_by}'"  # quoted: Hydra reads ':'
        )
    return settings


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
    cfg = parse_hydra_overrides(cfg, cpu_overrides(config, workers, output_dir))
    master = MasterConfig(**OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
    master.policy["generation"] = configure_generation_config(
        master.policy["generation"], tokenizer
    )
    return master
