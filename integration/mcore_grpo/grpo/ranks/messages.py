"""What the driver and the policy ranks send each other: plain, picklable dataclasses.

The driver (`mcore_grpo.grpo.driver.loop`) calls every rank through a runner
(`mcore_grpo.grpo.ranks.runner`); Ray pickles these across the process boundary, so they hold
Python lists and numbers only (no tokenizer, no tensors). Driver -> rank: `TaskTokens` (once,
at construction), `GroupSpec` (per generate call), `TrainShard` (per optimizer step). Rank ->
driver: `GenerateResult`, `TrainResult`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcore_grpo.grpo.tasks.task import Task


@dataclass(frozen=True)
class TaskTokens:
    """The task facts a rank needs (no tokenizer object crosses the process boundary)."""

    vocab_size: int
    pad_id: int
    eos_id: int

    @classmethod
    def of(cls, task: Task) -> TaskTokens:
        """The facts of `task` (a built-in task, `mcore_grpo.grpo.tasks.task.build_task`)."""
        return cls(vocab_size=task.vocab_size, pad_id=task.pad_id, eos_id=task.eos_id)


@dataclass(frozen=True)
class GroupSpec:
    """One prompt group to sample: its global index and prompt token ids."""

    index: int
    prompt_ids: tuple[int, ...]


@dataclass(frozen=True)
class GenerateResult:
    """One rank's samples for its prompt groups, in group order, each group's rows together."""

    responses: list[list[int]]
    generation_logprobs: list[list[float]]  # the sampler's logprob of each response token
    time_s: float


@dataclass(frozen=True)
class TrainShard:
    """One rank's slice of one optimizer step: a row per sample."""

    prompts: list[list[int]]
    responses: list[list[int]]
    advantages: list[float]
    generation_logprobs: list[list[float]]
    # Each sample's weight in the loss (NeMo-RL's loss_multiplier): 0 drops it, as
    # grpo.overlong_filtering does a truncated response; None: every sample counts.
    sample_mask: list[float] | None = None


@dataclass(frozen=True)
class TrainResult:
    """One rank's part of a GRPO step's training, for the driver to reduce over replicas.

    Every list has one entry per optimizer step. `kl_sum` and `prob_error_sum` are sums over
    this rank's response tokens of that step (`tokens` of them); `kl_penalty` is this rank's
    share of NeMo-RL's metric (its microbatches' unscaled KL sums divided by the step's
    global count); `loss` and `grad_norm` are already reduced over data parallelism by the
    train step. `token_metric_sums` holds the loss's token-normalised metrics as raw sums
    over this rank's tokens (``approx_entropy``, ``clip_fraction``, ...): the driver divides
    by the step's token count over all replicas.
    """

    kl_sum: list[float]
    prob_error_sum: list[float]
    tokens: list[float]
    kl_penalty: list[float]
    loss: list[float]
    grad_norm: list[float]
    logprob_time_s: float
    training_time_s: float
    # A mixture-of-experts model's router metrics, one dict per optimizer step (already
    # reduced over data parallelism by the worker; see mcore_grpo.worker.moe_metrics).
    moe: list[dict[str, Any]] = field(default_factory=list)
    token_metric_sums: list[dict[str, float]] = field(default_factory=list)
    lr: float = 0.0  # the learning rate this GRPO step trained with (NeMo-RL's `lr` metric)
