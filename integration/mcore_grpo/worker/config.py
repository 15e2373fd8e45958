"""Worker configuration: one dataclass, validated once, read by every piece."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from mcore_grpo.config.grpo import GRPOSection
from mcore_grpo.config.loss import ClippedPGLossConfig
from mcore_grpo.config.policy import (
    DDPSection,
    GenerationSection,
    MegatronSection,
    OptimizerSection,
    PolicySection,
)
from mcore_grpo.config.schedule import LRSchedule


@dataclass(frozen=True)
class MoEConfig:
    """megatron-core's MoE layer in every transformer layer (local spec: SequentialMLP experts,
    a top-k softmax router), the shape of Qwen3-MoE's family at a tiny size."""

    num_experts: int = 4
    router_topk: int = 2
    ffn_hidden_size: int | None = None  # per expert; None: the model's ffn_hidden_size
    shared_expert_intermediate_size: int | None = None  # None: no shared expert
    aux_loss_coeff: float = 1e-2  # switch load-balancing loss ("aux_loss"); 0 turns it off
    z_loss_coeff: float | None = None  # router z-loss (logit magnitude); None: off
    capacity_factor: float | None = None  # tokens per expert over the even share; None: dropless
    # The dispatcher that runs on gloo: megatron-core's "alltoall" one creates a CUDA stream in
    # its constructor (transformer/moe/token_dispatcher.py), so it cannot be built on a CPU.
    token_dispatcher_type: Literal["allgather", "alltoall"] = "allgather"


@dataclass(frozen=True)
class ModelConfig:
    """GPT dimensions; `hf_checkpoint` (through Megatron-Bridge, CPU or CUDA) overrides them."""

    num_layers: int = 2
    hidden_size: int = 32
    num_attention_heads: int = 4
    ffn_hidden_size: int | None = None
    vocab_size: int = 64
    max_sequence_length: int = 32
    # The model's embedding rows; > vocab_size models a padded vocab (ids >= vocab_size are
    # never valid tokens and are masked out of sampling).
    padded_vocab_size_override: int | None = None
    hf_checkpoint: str | None = None
    # Architecture knobs of megatron-core's local/TE spec, so a random-init model can take a
    # real architecture's shape (e.g. Qwen2.5: rope, GQA, RMSNorm, SwiGLU, qkv bias only).
    num_query_groups: int | None = None  # None: = num_attention_heads (no GQA)
    position_embedding_type: Literal["learned_absolute", "rope"] = "learned_absolute"
    rotary_base: int = 10000
    normalization: Literal["LayerNorm", "RMSNorm"] = "LayerNorm"
    swiglu: bool = False
    add_bias_linear: bool = True
    add_qkv_bias: bool = False
    tie_embeddings: bool = False  # output layer shares the input embedding's weights
    moe: MoEConfig | None = None  # None: a dense MLP in every layer

    @property
    def num_experts(self) -> int:
        """Routed experts per layer (0 for a dense model)."""
        return self.moe.num_experts if self.moe is not None else 0

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the embedding/output layer."""
        return self.padded_vocab_size_override or self.vocab_size


@dataclass(frozen=True)
class ParallelConfig:
    """Model-parallel sizes; DP is world_size / (TP * PP). The sizes' defaults are the run
    config's (`policy.megatron_cfg`); the worker resolves them into one layout."""

    tensor_model_parallel_size: int = MegatronSection.tensor_model_parallel_size
    pipeline_model_parallel_size: int = MegatronSection.pipeline_model_parallel_size
    context_parallel_size: int = MegatronSection.context_parallel_size
    expert_model_parallel_size: int = MegatronSection.expert_model_parallel_size
    # None: megatron-core's own default (= TP). A run passes its config's value; a bare worker
    # (tests at TP=2 with experts) keeps megatron-core's, not the run config's 1.
    expert_tensor_parallel_size: int | None = None
    sequence_parallel: bool = MegatronSection.sequence_parallel
    # How long megatron-core's process groups (TP, DP, ...) wait in a collective; Megatron-LM's
    # --distributed-timeout-minutes. The groups do not inherit the default group's timeout. A
    # run passes its cluster's (`cluster.collective_timeout_s`, 120 s: a lost rank is found
    # fast); a bare worker waits 30 min (Megatron-LM's default is 10; multi-rank tests on 2
    # cores build models and compile between collectives).
    distributed_timeout_minutes: float = 30.0


@dataclass(frozen=True)
class WorkerConfig:
    """Everything the policy worker needs; `validate()` raises with the field to fix."""

    # The run config's sections and settings, as they are (`mcore_grpo.config`): each default is
    # declared there once; `grpo/ranks/worker_settings.py` passes a run's.
    device: Literal["cpu", "cuda"] = PolicySection.device  # type: ignore[assignment]
    seed: int = GRPOSection.seed
    micro_batch_size: int = PolicySection.train_micro_batch_size
    ddp: DDPSection = field(default_factory=DDPSection)
    optimizer: OptimizerSection = field(default_factory=OptimizerSection)
    max_grad_norm: float = PolicySection.max_grad_norm
    loss: ClippedPGLossConfig = field(default_factory=ClippedPGLossConfig)
    # The sampling temperature. The logprob and training forwards divide the logits by it too
    # (NeMo-RL's `apply_temperature_scaling`), so the ratio and KL compare the distribution the
    # tokens were sampled from, not the T=1 one.
    temperature: float = GenerationSection.temperature
    # Parameter and compute dtype. bfloat16 = megatron-core's mixed precision: the model in
    # its `Float16Module` (bf16 weights, fp32 logits), fp32 main params in its optimizer.
    # Meant for GPUs; it runs on CPU too (the tests check the path there).
    precision: Literal["float32", "bfloat16"] = PolicySection.precision  # type: ignore[assignment]
    # Shared-prefix rows (`shared_prefix`): each group's common prefix (a GRPO prompt) forwarded
    # once in the logprob and training passes. None: on wherever the model's logits are exact
    # that way, else off with a logged reason; True: required (the build refuses, naming why);
    # False: off. NeMo-RL's key: `policy.shared_prefix_training`.
    shared_prefix: bool | None = PolicySection.shared_prefix_training
    # What the worker itself holds: the model it builds (the run's vocabulary and checkpoint
    # resolved), its parallel layout, and the learning-rate schedule resolved in GRPO steps
    # (`mcore_grpo.config.schedule.lr_schedule`; None: the rate stays `optimizer.lr`).
    model: ModelConfig = field(default_factory=ModelConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    schedule: LRSchedule | None = None

    def validate(self) -> WorkerConfig:
        """Reject configurations the worker cannot run, naming the field to change."""
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"WorkerConfig.device must be 'cpu' or 'cuda', got {self.device!r}")
        if self.parallel.pipeline_model_parallel_size != 1:
            raise NotImplementedError(
                "WorkerConfig.parallel.pipeline_model_parallel_size > 1 is not implemented: "
                "logprobs and sampling would have to be broadcast from the last stage. Use 1."
            )
        self._validate_parallel()
        if self.precision not in ("float32", "bfloat16"):
            raise ValueError(
                f"WorkerConfig.precision must be 'float32' or 'bfloat16', got {self.precision!r}"
            )
        self._validate_model()
        if self.ddp.overlap_param_gather and not self.optimizer.use_distributed_optimizer:
            raise ValueError(
                "WorkerConfig.ddp.overlap_param_gather needs optimizer.use_distributed_optimizer=True "
                "(megatron-core only gathers params for the distributed optimizer)."
            )
        if not self.temperature > 0:
            raise ValueError(
                f"WorkerConfig.temperature must be > 0, got {self.temperature} "
                "(use a small value for near-greedy sampling)"
            )
        moe = self.model.moe
        if self.shared_prefix and moe is not None and moe.capacity_factor is not None:
            raise ValueError(
                "WorkerConfig.shared_prefix=True with model.moe.capacity_factor: a capacity "
                "drops tokens by the load of the packed batch, where shared rows route each "
                "prompt once instead of once per sample. Set capacity_factor=None, or "
                "shared_prefix=None."
            )
        if self.micro_batch_size < 1:
            raise ValueError(
                f"WorkerConfig.micro_batch_size must be >= 1, got {self.micro_batch_size}"
            )
        return self

    def _validate_model(self) -> None:
        """Refuse architecture settings megatron-core would reject deep inside a build."""
        m = self.model
        if m.padded_vocab_size < m.vocab_size:
            raise ValueError(
                f"WorkerConfig.model.padded_vocab_size_override={m.padded_vocab_size} is below "
                f"vocab_size={m.vocab_size}: every token id needs an embedding row."
            )
        groups = m.num_query_groups or m.num_attention_heads
        if m.num_attention_heads % groups:
            raise ValueError(
                f"WorkerConfig.model.num_query_groups={groups} must divide "
                f"num_attention_heads={m.num_attention_heads} (GQA shares each K/V head "
                "among a whole number of query heads)."
            )
        if m.hidden_size % m.num_attention_heads:
            raise ValueError(
                f"WorkerConfig.model.hidden_size={m.hidden_size} must be a multiple of "
                f"num_attention_heads={m.num_attention_heads}."
            )
        if m.position_embedding_type not in ("learned_absolute", "rope"):
            raise ValueError(
                "WorkerConfig.model.position_embedding_type must be 'learned_absolute' or "
                f"'rope', got {m.position_embedding_type!r}"
            )
        if m.normalization not in ("LayerNorm", "RMSNorm"):
            raise ValueError(
                "WorkerConfig.model.normalization must be 'LayerNorm' or 'RMSNorm', got "
                f"{m.normalization!r}"
            )

    @property
    def torch_device(self) -> torch.device:
        """The device this rank's tensors live on: the CPU, or the rank's current GPU."""
        if self.device == "cuda":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def _validate_parallel(self) -> None:
        """Refuse parallel settings this worker would otherwise drop or run wrong."""
        p = self.parallel
        if p.context_parallel_size != 1:
            raise NotImplementedError(
                "WorkerConfig.parallel.context_parallel_size > 1 is not implemented: the "
                "worker's attention masks and logprobs assume whole sequences on each rank. "
                "Use 1."
            )
        ep = p.expert_model_parallel_size
        experts = self.model.num_experts
        if ep != 1 and self.model.hf_checkpoint is None and not experts:
            raise ValueError(
                "WorkerConfig.parallel.expert_model_parallel_size > 1 needs a mixture-of-experts "
                "model (model.moe, or an MoE model.hf_checkpoint); this one is dense. Use 1."
            )
        moe = self.model.moe
        if moe is not None and moe.shared_expert_intermediate_size and self.model.add_bias_linear:
            raise ValueError(
                "WorkerConfig.model.moe.shared_expert_intermediate_size needs "
                "model.add_bias_linear=False (megatron-core's shared expert has no bias)"
            )
        if experts and experts % ep:
            raise ValueError(
                f"WorkerConfig.parallel.expert_model_parallel_size={ep} does not divide the "
                f"model's {experts} experts; use one of "
                f"{[d for d in range(1, experts + 1) if experts % d == 0]}"
            )
        if experts and p.tensor_model_parallel_size > 1 and not p.sequence_parallel:
            raise ValueError(
                "WorkerConfig.parallel: megatron-core trains MoE layers at "
                "tensor_model_parallel_size > 1 only with sequence_parallel=True (its MoELayer "
                "refuses otherwise): set it, or spread the experts with "
                "expert_model_parallel_size instead"
            )
        if p.sequence_parallel and p.tensor_model_parallel_size == 1:
            raise ValueError(
                "WorkerConfig.parallel.sequence_parallel needs tensor_model_parallel_size > 1 "
                "(it splits the sequence over the TP ranks)."
            )
