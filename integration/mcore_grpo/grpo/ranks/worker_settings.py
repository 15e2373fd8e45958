"""Run config -> what a policy rank builds: the worker's `WorkerConfig` and `SamplingParams`.

The run config (`mcore_grpo.config`) speaks NeMo-RL's keys; the worker takes its sections as
they are (the optimizer, DDP and loss sections, the policy's scalar settings) plus what only a
run resolves: the model over the task's vocabulary, the parallel layout with the cluster's
collective timeout, the learning-rate schedule in GRPO steps. This module is that one step;
every setting the worker can honour reaches it (the worker refuses the ones it cannot).
"""

from __future__ import annotations

from mcore_grpo.config.policy import GenerationSection
from mcore_grpo.config.schedule import lr_schedule
from mcore_grpo.config.schema import RunConfig
from mcore_grpo.grpo.ranks.messages import TaskTokens
from mcore_grpo.worker.config import (
    ModelConfig,
    MoEConfig,
    ParallelConfig,
    WorkerConfig,
)
from mcore_grpo.worker.generation import SamplingParams

# The tiny model's vocab is padded as Megatron pads it (`--make-vocab-size-divisible-by`
# 128, times the TP size). The worker's sampler, logprob and training forwards all
# normalise over the task's real ids only, so the padding changes no distribution.
VOCAB_DIVISIBLE_BY = 128


def padded_vocab_size(vocab_size: int, tensor_parallel_size: int) -> int:
    """Embedding rows of the tiny model (a multiple Megatron's TP vocab split can divide)."""
    multiple = VOCAB_DIVISIBLE_BY * tensor_parallel_size
    return -(-vocab_size // multiple) * multiple


def worker_config(config: RunConfig, tokens: TaskTokens) -> WorkerConfig:
    """The integration worker's `WorkerConfig` for this run."""
    p = config.policy
    mc = p.megatron_cfg
    return WorkerConfig(
        device=p.device,  # type: ignore[arg-type]
        seed=config.grpo.seed,
        micro_batch_size=p.train_micro_batch_size,
        model=_model(config, tokens),
        parallel=ParallelConfig(
            tensor_model_parallel_size=mc.tensor_model_parallel_size,
            pipeline_model_parallel_size=mc.pipeline_model_parallel_size,
            context_parallel_size=mc.context_parallel_size,
            expert_model_parallel_size=mc.expert_model_parallel_size,
            expert_tensor_parallel_size=mc.expert_tensor_parallel_size,
            sequence_parallel=mc.sequence_parallel,
            distributed_timeout_minutes=config.cluster.collective_timeout_s / 60,
        ),
        ddp=mc.distributed_data_parallel_config,
        optimizer=mc.optimizer,
        max_grad_norm=p.max_grad_norm,
        schedule=lr_schedule(config),
        loss=config.loss_fn,
        temperature=p.generation.temperature,
        precision=p.precision,  # type: ignore[arg-type]
        shared_prefix=p.shared_prefix_training,
    )


def _model(config: RunConfig, tokens: TaskTokens) -> ModelConfig:
    """The model the worker builds: ``policy.tiny_model``'s shape over the task's vocabulary
    (padded as Megatron pads it), or the Hugging Face checkpoint ``policy.model_name``."""
    p = config.policy
    tiny = p.tiny_model
    return ModelConfig(
        num_layers=tiny.num_layers,
        hidden_size=tiny.hidden_size,
        num_attention_heads=tiny.num_attention_heads,
        ffn_hidden_size=tiny.ffn_hidden_size,
        vocab_size=tokens.vocab_size,
        max_sequence_length=p.max_total_sequence_length,
        padded_vocab_size_override=tiny.padded_vocab_size
        or padded_vocab_size(tokens.vocab_size, p.megatron_cfg.tensor_model_parallel_size),
        hf_checkpoint=None if p.model_name == "tiny-gpt" else p.model_name,
        num_query_groups=tiny.num_query_groups,
        position_embedding_type=tiny.position_embedding_type,  # type: ignore[arg-type]
        rotary_base=tiny.rotary_base,
        normalization=tiny.normalization,  # type: ignore[arg-type]
        swiglu=tiny.swiglu,
        add_bias_linear=tiny.add_bias_linear,
        add_qkv_bias=tiny.add_qkv_bias,
        tie_embeddings=tiny.tie_embeddings,
        moe=_moe(config),
    )


def _moe(config: RunConfig) -> MoEConfig | None:
    """The tiny model's MoE layer from ``policy.tiny_model`` and the router keys."""
    tiny, mc = config.policy.tiny_model, config.policy.megatron_cfg
    if not tiny.num_moe_experts:
        return None
    balanced = mc.moe_router_load_balancing_type == "aux_loss"
    return MoEConfig(
        num_experts=tiny.num_moe_experts,
        router_topk=tiny.moe_router_topk,
        ffn_hidden_size=tiny.moe_ffn_hidden_size,
        shared_expert_intermediate_size=tiny.moe_shared_expert_intermediate_size,
        aux_loss_coeff=mc.moe_aux_loss_coeff if balanced else 0.0,
        z_loss_coeff=mc.moe_z_loss_coeff,
        capacity_factor=mc.moe_expert_capacity_factor,
        token_dispatcher_type=mc.moe_token_dispatcher_type,  # type: ignore[arg-type]
    )


def stop_token_ids(generation: GenerationSection, eos_id: int) -> tuple[int, ...]:
    """The tokens that end a response: `policy.generation.stop_token_ids`, else the task's EOS."""
    stops = generation.stop_token_ids
    return tuple(stops) if stops is not None else (eos_id,)


def sampling_params(config: RunConfig, tokens: TaskTokens) -> SamplingParams:
    """The worker's sampling settings: `policy.generation.*`, EOS as the default stop."""
    g = config.policy.generation
    stops = stop_token_ids(g, tokens.eos_id)
    return SamplingParams(
        temperature=g.temperature,
        top_p=g.top_p,
        max_new_tokens=g.max_new_tokens,
        stop_token_ids=stops,
        pad_token_id=tokens.pad_id,
        # NeMo-RL's `megatron` backend = megatron-core's inference machinery: the KV cache.
        backend="static_cache" if g.backend == "megatron" else g.backend,
    )
