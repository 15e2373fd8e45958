"""``policy.*``: the model, its batches, sampling, parallelism and the optimizer (NeMo-RL's keys)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MCoreGenerationSection:
    """``policy.generation.mcore_generation_config.*``: megatron-core inference engine (GPU)."""

    unified_memory_level: int = 0
    kv_cache_management_mode: str = "persist"
    reset_cuda_graphs: bool = False
    cuda_graph_impl: str = "none"
    buffer_size_gb: float = 10.0


@dataclass
class GenerationSection:
    """``policy.generation.*``: sampling."""

    backend: str = "megatron"
    max_new_tokens: int = 2
    temperature: float = 1.0
    top_p: float = 1.0
    # None: the task's end-of-sequence token.
    stop_token_ids: list[int] | None = None
    mcore_generation_config: MCoreGenerationSection = field(default_factory=MCoreGenerationSection)


@dataclass
class OptimizerSection:
    """``policy.megatron_cfg.optimizer.*``: megatron-core's `OptimizerConfig` keys; the worker
    builds its optimizer from this section as it is."""

    optimizer: str = "adam"  # or "sgd" (megatron-core's two; momentum 0)
    lr: float = 1.0e-3
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1.0e-8
    use_distributed_optimizer: bool = True
    min_lr: float = 0.0  # the floor of a decaying schedule (policy.megatron_cfg.scheduler)


@dataclass
class SchedulerSection:
    """``policy.megatron_cfg.scheduler.*``: NeMo-RL's keys (Megatron-Bridge's
    `SchedulerConfig`), in GRPO steps as NeMo-RL counts them (`mcore_grpo.worker.lr_schedule`).

    The learning rate warms up linearly from `lr_warmup_init` to ``optimizer.lr`` over
    `lr_warmup_iters` steps, then follows `lr_decay_style` down to ``optimizer.min_lr`` at
    `lr_decay_iters` (null: ``grpo.max_num_steps``, NeMo-RL's ``train_iters``). The weight
    decays null are ``optimizer.weight_decay`` (NeMo-RL's example interpolations).
    """

    lr_warmup_iters: int = 0
    lr_warmup_init: float = 0.0
    lr_decay_style: str = "constant"
    lr_decay_iters: int | None = None
    start_weight_decay: float | None = None
    end_weight_decay: float | None = None
    weight_decay_incr_style: str = "constant"


@dataclass
class DDPSection:
    """``policy.megatron_cfg.distributed_data_parallel_config.*``."""

    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    grad_reduce_in_fp32: bool = True
    # Parameters per gradient bucket; None: megatron-core's own choice.
    bucket_size: int | None = None


@dataclass
class MegatronSection:
    """``policy.megatron_cfg.*``: parallelism and the training-side megatron settings."""

    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    context_parallel_size: int = 1
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: int = 1
    sequence_parallel: bool = False
    # NeMo-RL's MoE router keys (its default "none": no load-balancing loss in GRPO), plus the
    # loss coefficients and capacity megatron-core takes; read for policy.tiny_model's experts.
    moe_router_load_balancing_type: str = "none"  # or "aux_loss"
    moe_aux_loss_coeff: float = 0.0
    moe_z_loss_coeff: float | None = None
    moe_expert_capacity_factor: float | None = None  # None: dropless
    # NeMo-RL's default is "alltoall", which megatron-core builds with a CUDA stream: on a CPU
    # only "allgather" runs.
    moe_token_dispatcher_type: str = "allgather"
    optimizer: OptimizerSection = field(default_factory=OptimizerSection)
    scheduler: SchedulerSection = field(default_factory=SchedulerSection)
    distributed_data_parallel_config: DDPSection = field(default_factory=DDPSection)


@dataclass
class TinyModelSection:
    """``policy.tiny_model.*``: the GPT built from scratch (random init) when ``model_name`` is
    ``tiny-gpt``; the architecture keys let it take a real model's shape (gpu-smoke)."""

    num_layers: int = 2
    hidden_size: int = 64
    num_attention_heads: int = 4
    ffn_hidden_size: int = 128
    num_query_groups: int | None = None  # GQA; None = num_attention_heads
    position_embedding_type: str = "learned_absolute"  # or "rope"
    rotary_base: int = 10000
    normalization: str = "LayerNorm"  # or "RMSNorm"
    swiglu: bool = False
    add_bias_linear: bool = True
    add_qkv_bias: bool = False
    tie_embeddings: bool = False
    # Embedding/output rows; None = the task's vocab padded to a multiple of 128 x TP.
    padded_vocab_size: int | None = None
    # Mixture of experts in every layer (0: dense): megatron-core's MoE layer, local spec.
    num_moe_experts: int = 0
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None  # per expert; None = ffn_hidden_size
    moe_shared_expert_intermediate_size: int | None = None  # None: no shared expert


@dataclass
class PolicySection:
    """``policy.*``: the model, its batch sizes and where it runs."""

    model_name: str = "tiny-gpt"
    device: str = "cpu"
    precision: str = "float32"
    train_global_batch_size: int = 64
    train_micro_batch_size: int = 16
    logprob_batch_size: int = 16
    max_total_sequence_length: int = 16
    max_grad_norm: float = 1.0
    # NeMo-RL's key (open PR NVIDIA-NeMo/RL #4008): each prompt forwarded once per group in the
    # logprob and training passes. None: wherever exact (`mcore_grpo.worker.shared_prefix`).
    shared_prefix_training: bool | None = None
    tiny_model: TinyModelSection = field(default_factory=TinyModelSection)
    generation: GenerationSection = field(default_factory=GenerationSection)
    megatron_cfg: MegatronSection = field(default_factory=MegatronSection)
