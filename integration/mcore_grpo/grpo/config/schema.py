"""The GRPO run config's schema: one dataclass per section (the cross-field checks of a
whole config: `mcore_grpo.grpo.config.validation`).

Keys follow NeMo-RL's names where NeMo-RL has them (``grpo.num_prompts_per_step``,
``policy.train_global_batch_size``, ``policy.megatron_cfg.tensor_model_parallel_size``, ...),
so a NeMo-RL user types the same overrides. Reading presets, YAML files and ``key=value``
overrides into this schema is `mcore_grpo.grpo.config.config_loader`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from mcore_grpo.grpo.algorithm.loss import ClippedPGLossConfig
from mcore_grpo.grpo.algorithm.reward_shaping import RewardShapingConfig
from mcore_grpo.grpo.config.deadline import must_save_by_seconds


class ConfigError(ValueError):
    """A run config that cannot be used; the message names the key and the fix."""


# NeMo-RL's advantage estimators; this project implements GRPO's only.
ADV_ESTIMATORS = ("grpo",)


@dataclass
class AdvEstimatorSection:
    """``grpo.adv_estimator.*``: NeMo-RL's advantage estimator settings.

    NeMo-RL's GRPO estimator reads ``grpo.adv_estimator.normalize_rewards`` and
    ``grpo.adv_estimator.use_leave_one_out_baseline`` (advantage_estimator.py:66-67); its
    example configs set them to ``${grpo.normalize_rewards}`` and
    ``${grpo.use_leave_one_out_baseline}``. Here ``null`` (the default) is that
    interpolation: unset, the ``grpo.*`` value applies; set, it wins.
    """

    name: str = "grpo"
    normalize_rewards: bool | None = None
    use_leave_one_out_baseline: bool | None = None
    # Read only by NeMo-RL's Reinforce++ estimator (refused by `name`); inert for GRPO there
    # too. Accepted so NeMo-RL's example `grpo` sections load unchanged.
    minus_baseline: bool = True

    def __post_init__(self) -> None:
        if self.name not in ADV_ESTIMATORS:
            raise ValueError(
                f"grpo.adv_estimator.name={self.name!r}: only NeMo-RL's 'grpo' estimator is "
                "implemented here (gdpo needs named reward components, reinforce_plus_plus "
                "a KL-in-reward path and opd a teacher; none exists in this project)"
            )


@dataclass
class GRPOSection:
    """``grpo.*``: the algorithm's batch shape and advantage settings."""

    num_prompts_per_step: int = 8
    num_generations_per_prompt: int = 8
    max_num_steps: int = 40
    normalize_rewards: bool = True
    use_leave_one_out_baseline: bool = True
    seed: int = 42
    adv_estimator: AdvEstimatorSection = field(default_factory=AdvEstimatorSection)
    # NeMo-RL's keys for responses that spent the token budget without a stop token:
    # their reward scaled or length-penalised (`reward_shaping`), or their loss dropped
    # (`overlong_filtering`); `mcore_grpo.grpo.algorithm.reward_shaping`.
    reward_shaping: RewardShapingConfig = field(default_factory=RewardShapingConfig)
    overlong_filtering: bool = False
    # Held-out evaluation (math tasks), NeMo-RL's keys: greedy accuracy on the eval split
    # before step 1, every val_period steps (0: never) and after the last step; at most
    # max_val_samples problems, val_batch_size prompts per generate call.
    val_period: int = 0
    val_at_start: bool = False
    val_at_end: bool = False
    max_val_samples: int = 256
    val_batch_size: int = 32
    # NeMo-RL's key: no reference-policy logprob forward (true needs
    # loss_fn.reference_policy_kl_penalty 0). null: NeMo-RL's default, skipped exactly when the
    # loss has no KL term; false at KL 0 keeps the forward for the `kl` metric alone (its
    # cost: docs/grpo.md, "Metrics that explain a run").
    skip_reference_policy_logprobs_calculation: bool | None = None

    @property
    def advantage_normalize_rewards(self) -> bool:
        """What the advantage estimator uses: ``adv_estimator.*`` if set, else ``grpo.*``."""
        own = self.adv_estimator.normalize_rewards
        return self.normalize_rewards if own is None else own

    @property
    def advantage_leave_one_out(self) -> bool:
        """What the advantage estimator uses: ``adv_estimator.*`` if set, else ``grpo.*``."""
        own = self.adv_estimator.use_leave_one_out_baseline
        return self.use_leave_one_out_baseline if own is None else own


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
    """``policy.megatron_cfg.optimizer.*`` (megatron-core Adam)."""

    optimizer: str = "adam"
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


# task.name of the real-model math tasks (mcore_grpo.grpo.tasks.math_task): the checkpoint's tokenizer.
MATH_TASKS = ("arithmetic", "math-dataset")
# NeMo-RL's `MathEnvironment` verifiers (``env.math.math_verify_impl`` in its configs).
MATH_VERIFY_IMPLS = ("hf_math_verify", "dapo_math_verify")


@dataclass
class ArithmeticSection:
    """``task.arithmetic.*``: the generated arithmetic problems' difficulty knob
    (`mcore_grpo.grpo.tasks.math_data.ArithmeticSpec`) and how many distinct problems to draw."""

    digits: int = 1
    operations: list[str] = field(default_factory=lambda: ["+", "*"])
    terms: int = 3
    num_problems: int = 2000
    seed: int = 7
    # A wider training pool: `train_problems` more distinct problems with operands of 1 to
    # `train_digits` digits, held-out questions removed (0: only what the split leaves).
    train_digits: int = 2
    train_problems: int = 0
    base_share: float = 0.0  # with a wider pool: the split's share of draws (math_data)


@dataclass
class DatasetSection:
    """``task.dataset.*``: a local JSONL/Parquet math dataset (GSM8K's shape by default;
    NeMo-RL's ``problem``/``expected_answer`` with answer_format=plain)."""

    train_path: str = "../shared/data/gsm8k/train.jsonl"
    # None: the eval split is task.eval_size rows held out of train_path.
    eval_path: str | None = "../shared/data/gsm8k/test.jsonl"
    question_key: str = "question"
    answer_key: str = "answer"
    answer_format: str = "gsm8k"  # or "plain"
    seed: int = 7


@dataclass
class TaskSection:
    """``task.*``: the verifiable task (see `mcore_grpo.grpo.tasks.task` and, for a real model's
    math tasks ``arithmetic`` / ``math-dataset``, `mcore_grpo.grpo.tasks.math_task`)."""

    name: str = "digit-add"
    max_addend: int = 1
    # count-on only: how many terms the answer has (the response is num_terms + 1 tokens).
    num_terms: int = 20
    # Math tasks: held-out problems (0 with an eval_path: all of it), prompts longer than
    # max_prompt_tokens left out, NeMo-RL's prompt files (None: examples/prompts/cot.txt).
    eval_size: int = 200
    max_prompt_tokens: int = 256
    prompt_file: str | None = None
    system_prompt_file: str | None = None
    # NeMo-RL's key (env.math.math_verify_impl): hf_math_verify (its default: math-verify on
    # the whole response, boxed or plain expressions; arithmetic left undone, e.g. a restated
    # question, is not graded when the ground truth is a number: the series' NeMo-RL patch
    # math-verify-graded-by-stated-answer) or dapo_math_verify (Minerva's last "Answer: X"
    # line, compared after normalisation), see docs/real-model.md.
    math_verify_impl: str = "hf_math_verify"
    arithmetic: ArithmeticSection = field(default_factory=ArithmeticSection)
    dataset: DatasetSection = field(default_factory=DatasetSection)


@dataclass
class ClusterSection:
    """``cluster.*``: the nodes of the run and how long a silent worker is waited for.

    `num_nodes` means what it means in NeMo-RL: the ``--workers`` ranks are spread over that
    many nodes of the Ray cluster, an equal share on each (`mcore_grpo.grpo.cluster.placement`).
    `gpus_per_node` is what a GPU preset needs (documentation and a check, not a scheduler).
    """

    gpus_per_node: int = 0
    num_nodes: int = 1
    # How long a torch.distributed collective waits for a peer, and how long the driver waits
    # for a rank whose peers have all answered a call (`mcore_grpo.grpo.cluster.fault`).
    collective_timeout_s: float = 120.0
    # After a first failure, how long the driver listens for its cause: Ray declares a lost
    # node dead after its health checks (about 15 s with Ray's defaults).
    fault_wait_s: float = 30.0


@dataclass
class CheckpointingSection:
    """``checkpointing.*``: a checkpoint every `save_period` steps and at the end of the run;
    the newest `keep_top_k` are kept (NeMo-RL's key: with no metric it keeps the most recent).

    On by default so that a run killed at any moment (OOM killer, preemption) resumes from at
    most `save_period` steps back; NeMo-RL's GRPO configs save every 10 steps, keep 3.
    """

    enabled: bool = True
    save_period: int = 10
    keep_top_k: int = 3
    # NeMo-RL's key ("consolidated checkpoints, for HF compatibility"): every checkpoint also
    # holds the policy as a Hugging Face checkpoint (`hf/`, exported through Megatron-Bridge,
    # tokenizer included), so the last one is the trained model in HF format. HF models only.
    save_consolidated: bool = False
    # NeMo-RL's key: "DD:HH:MM:SS" after the start by which the run saves (a job's time limit):
    # the step after which one more mean step would pass it ends the run as its last step
    # (evaluation, checkpoint, export; leave room for them); `--resume` goes on. None: no limit.
    checkpoint_must_save_by: str | None = None

    def __post_init__(self) -> None:
        must_save_by_seconds(self.checkpoint_must_save_by)  # ValueError: a bad value


@dataclass
class RunConfig:
    """The whole run config."""

    grpo: GRPOSection = field(default_factory=GRPOSection)
    loss_fn: ClippedPGLossConfig = field(default_factory=ClippedPGLossConfig)
    policy: PolicySection = field(default_factory=PolicySection)
    task: TaskSection = field(default_factory=TaskSection)
    cluster: ClusterSection = field(default_factory=ClusterSection)
    checkpointing: CheckpointingSection = field(default_factory=CheckpointingSection)

    @property
    def skips_reference_logprobs(self) -> bool:
        """Whether the ranks skip the reference forward: as set, else as NeMo-RL does (when
        the KL coefficient is 0; then the `kl` metric reads 0, not measured)."""
        skip = self.grpo.skip_reference_policy_logprobs_calculation
        return self.loss_fn.reference_policy_kl_penalty == 0 if skip is None else skip

    @property
    def samples_per_step(self) -> int:
        """Sequences generated (and trained on) per GRPO step."""
        return self.grpo.num_prompts_per_step * self.grpo.num_generations_per_prompt

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (for YAML dumps, checkpoints and logs)."""
        return dataclasses.asdict(self)


def unused_settings(config: RunConfig) -> list[str]:
    """``key=value`` of the settings this run reads but cannot act on yet, so the CLI can say
    so instead of dropping them silently: megatron-core's dynamic inference engine does not
    sample for the worker (see docs/grpo.md), so its ``mcore_generation_config`` is unused."""
    used = config.policy.generation.mcore_generation_config
    default = MCoreGenerationSection()
    return [
        f"policy.generation.mcore_generation_config.{f.name}={getattr(used, f.name)}"
        for f in dataclasses.fields(MCoreGenerationSection)
        if getattr(used, f.name) != getattr(default, f.name)
    ]


def check_data_parallel(config: RunConfig, world_size: int) -> int:
    """Data-parallel size for `world_size` workers; errors name the keys to change."""
    mc = config.policy.megatron_cfg
    model_parallel = mc.tensor_model_parallel_size * mc.pipeline_model_parallel_size
    if world_size % model_parallel:
        raise ConfigError(
            f"--workers {world_size} is not a multiple of policy.megatron_cfg."
            f"tensor_model_parallel_size * pipeline_model_parallel_size = {model_parallel}"
        )
    dp = world_size // model_parallel
    per_rank = config.policy.train_global_batch_size / dp
    if per_rank != int(per_rank) or int(per_rank) % config.policy.train_micro_batch_size:
        raise ConfigError(
            f"policy.train_global_batch_size={config.policy.train_global_batch_size} must "
            f"split into data-parallel size {dp} x whole microbatches of "
            f"policy.train_micro_batch_size={config.policy.train_micro_batch_size}"
        )
    if config.samples_per_step % dp:
        raise ConfigError(
            f"{config.samples_per_step} samples per step do not split evenly over "
            f"data-parallel size {dp}"
        )
    return dp
