"""The GRPO run config's schema: one dataclass per section (the cross-field checks of a
whole config: `mcore_grpo.config.validation`).

Keys follow NeMo-RL's names where NeMo-RL has them (``grpo.num_prompts_per_step``,
``policy.train_global_batch_size``, ``policy.megatron_cfg.tensor_model_parallel_size``, ...),
so a NeMo-RL user types the same overrides. Reading presets, YAML files and ``key=value``
overrides into this schema is `mcore_grpo.config.loader`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from mcore_grpo.config.deadline import must_save_by_seconds
from mcore_grpo.config.grpo import GRPOSection
from mcore_grpo.config.loss import ClippedPGLossConfig
from mcore_grpo.config.policy import MCoreGenerationSection, PolicySection
from mcore_grpo.config.task import TaskSection


class ConfigError(ValueError):
    """A run config that cannot be used; the message names the key and the fix."""


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
