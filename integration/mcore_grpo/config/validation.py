"""The cross-field checks of a whole run config, each naming the keys to change.

The schema (`mcore_grpo.config.schema`) checks one value at a time; what depends on
several sections (batch shapes, the MoE router, the reference forward, the task and model)
is checked here, once the config is built (`loader.load_config`).
"""

from __future__ import annotations

from mcore_grpo.config.schedule import lr_schedule
from mcore_grpo.config.schema import ConfigError, RunConfig
from mcore_grpo.config.task import MATH_TASKS, MATH_VERIFY_IMPLS


def _validate_moe(config: RunConfig) -> None:
    tiny, mc = config.policy.tiny_model, config.policy.megatron_cfg
    if mc.moe_router_load_balancing_type not in ("aux_loss", "none"):
        raise ConfigError(
            f"policy.megatron_cfg.moe_router_load_balancing_type="
            f"{mc.moe_router_load_balancing_type!r}: use 'aux_loss' or 'none'"
        )
    if mc.moe_token_dispatcher_type not in ("allgather", "alltoall"):
        raise ConfigError(
            f"policy.megatron_cfg.moe_token_dispatcher_type={mc.moe_token_dispatcher_type!r}: "
            "use 'allgather' (runs on CPU) or 'alltoall' (CUDA)"
        )
    if tiny.num_moe_experts < 0 or (
        tiny.num_moe_experts and not 1 <= tiny.moe_router_topk <= tiny.num_moe_experts
    ):
        raise ConfigError(
            f"policy.tiny_model.num_moe_experts={tiny.num_moe_experts}, moe_router_topk="
            f"{tiny.moe_router_topk}: need 0 experts (dense) or 1 <= topk <= experts"
        )


def validate(config: RunConfig) -> None:
    """Cross-field checks, each naming the keys to change (the first failing one raises)."""
    _validate_batches(config)
    _validate_moe(config)
    _validate_schedule_and_reference(config)
    _validate_cluster_and_saves(config)
    _validate_task_and_checkpoints(config)
    _validate_sampling(config)


def _validate_batches(config: RunConfig) -> None:
    """Counts >= 1, groups of two or more samples, and a step that cuts into whole batches."""
    g, p = config.grpo, config.policy
    for key, value in (
        ("grpo.num_prompts_per_step", g.num_prompts_per_step),
        ("grpo.num_generations_per_prompt", g.num_generations_per_prompt),
        ("grpo.max_num_steps", g.max_num_steps),
        ("policy.train_global_batch_size", p.train_global_batch_size),
        ("policy.train_micro_batch_size", p.train_micro_batch_size),
        ("policy.logprob_batch_size", p.logprob_batch_size),
        ("policy.generation.max_new_tokens", p.generation.max_new_tokens),
    ):
        if value < 1:
            raise ConfigError(f"{key}={value}: must be >= 1")
    if g.num_generations_per_prompt < 2:
        raise ConfigError(
            "grpo.num_generations_per_prompt must be >= 2: GRPO's advantage compares the "
            "samples of one prompt"
        )
    if config.samples_per_step % p.train_global_batch_size:
        raise ConfigError(
            f"grpo.num_prompts_per_step * grpo.num_generations_per_prompt = "
            f"{config.samples_per_step} samples per step is not a multiple of "
            f"policy.train_global_batch_size={p.train_global_batch_size}"
        )


def _validate_schedule_and_reference(config: RunConfig) -> None:
    """The LR schedule megatron-core will build, and a KL term that has its reference."""
    try:  # what megatron-core's scheduler would assert on when the workers build it
        lr_schedule(config).check(config.policy.megatron_cfg.optimizer.lr)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    beta = config.loss_fn.reference_policy_kl_penalty
    if config.grpo.skip_reference_policy_logprobs_calculation and beta != 0:
        raise ConfigError(
            f"grpo.skip_reference_policy_logprobs_calculation=true needs "
            f"loss_fn.reference_policy_kl_penalty=0 (it is {beta}): the KL term reads the "
            "reference logprobs (NeMo-RL refuses the same)"
        )


def _validate_cluster_and_saves(config: RunConfig) -> None:
    """Timeouts, the node count and the save period: positive where they must be."""
    for key, seconds in (
        ("cluster.collective_timeout_s", config.cluster.collective_timeout_s),
        ("cluster.fault_wait_s", config.cluster.fault_wait_s),
    ):
        if not seconds > 0:
            raise ConfigError(f"{key}={seconds}: must be a number of seconds > 0")
    if config.cluster.num_nodes < 1:
        raise ConfigError(f"cluster.num_nodes={config.cluster.num_nodes}: must be >= 1")
    if config.checkpointing.save_period < 0:
        raise ConfigError(
            f"checkpointing.save_period={config.checkpointing.save_period}: must be >= 0 "
            "(0: only at the end of the run)"
        )


def _validate_task_and_checkpoints(config: RunConfig) -> None:
    """What a math task and a consolidated checkpoint need of the model, a known verifier,
    and checkpoints to keep."""
    model = config.policy.model_name
    if config.task.name in MATH_TASKS and model == "tiny-gpt":
        raise ConfigError(
            f"task.name={config.task.name} needs a pretrained Hugging Face model with a chat "
            "template (policy.model_name: smollm2-135m-instruct, a checkpoint directory or a Hub "
            "id); tiny-gpt speaks only the built-in tasks' 15 symbols"
        )
    if config.task.math_verify_impl not in MATH_VERIFY_IMPLS:
        raise ConfigError(
            f"task.math_verify_impl={config.task.math_verify_impl!r}: NeMo-RL's math environment "
            f"knows {' and '.join(MATH_VERIFY_IMPLS)}"
        )
    if config.checkpointing.save_consolidated and model == "tiny-gpt":
        raise ConfigError(
            "checkpointing.save_consolidated=true needs a Hugging Face model "
            "(policy.model_name: a checkpoint, a Hub id or tiny-hf-qwen2); tiny-gpt has no "
            "Hugging Face format"
        )
    if config.checkpointing.keep_top_k < 1:
        raise ConfigError(
            f"checkpointing.keep_top_k={config.checkpointing.keep_top_k}: must be >= 1"
        )


def _validate_sampling(config: RunConfig) -> None:
    """The device, and a sampler whose top-p and temperature define a distribution."""
    p = config.policy
    if p.device not in ("cpu", "cuda"):
        raise ConfigError(f"policy.device={p.device!r}: use 'cpu' or 'cuda'")
    if not 0 < p.generation.top_p <= 1:
        raise ConfigError(f"policy.generation.top_p={p.generation.top_p}: must be in (0, 1]")
    if p.generation.temperature <= 0:
        raise ConfigError(f"policy.generation.temperature={p.generation.temperature}: must be > 0")
