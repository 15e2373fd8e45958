"""NeMo-RL's loss function (e.g. `ClippedPGLossFn`) as the worker's microbatch loss sum.

NeMo-RL calls a loss as ``loss_fn(next_token_logprobs, data, global_valid_seqs,
global_valid_toks) -> (loss, metrics)`` with the GLOBAL counts, so per-microbatch losses sum
to the step's loss. The worker's split step (`mcore_grpo.worker.train_step`) wants the
un-normalised sum and divides once by the global count at `finish_train_step`. The two meet
exactly as NeMo-RL's own split step does it (`megatron_policy_worker` #2683): call the loss
with placeholder counts 1 (a raw sum), then rescale each metric once per optimizer step by
the denominator the loss declares for it (``loss_fn.metric_normalizations``,
`MetricNormalizer`: tokens, sequences, or none; a metric it does not declare is normalised
like the gradient, by its ``loss_type``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

# A NeMo-RL loss: (next_token_logprobs [B, S-1], data, global_valid_seqs, global_valid_toks)
# -> (scalar loss, metrics dict).
NemoRLLoss = Callable[..., tuple[torch.Tensor, dict[str, Any]]]


def loss_level(loss_fn: Any) -> str:
    """``token`` or ``sequence``: what the loss's gradient is normalised by."""
    value = getattr(getattr(loss_fn, "loss_type", None), "value", None)
    if value == "token_level":
        return "token"
    if value == "sequence_level":
        return "sequence"
    raise ValueError(
        f"{type(loss_fn).__name__}.loss_type={getattr(loss_fn, 'loss_type', None)!r}: the "
        "worker's split step supports NeMo-RL's TOKEN_LEVEL and SEQUENCE_LEVEL losses only"
    )


def normaliser(loss_fn: Any, metric: str) -> str:
    """``tokens``, ``sequences`` or ``none``: the global denominator of one metric."""
    declared = getattr(loss_fn, "metric_normalizations", None) or {}
    kind = declared.get(metric)
    if kind is not None:
        return str(getattr(kind, "value", kind))
    if metric.endswith(("_min", "_max")):
        return "none"
    return "tokens" if loss_level(loss_fn) == "token" else "sequences"


@dataclass
class NemoRLLossSum:
    """The worker's `LossSumFn` over a NeMo-RL loss; records each microbatch's raw metrics.

    `wrap` turns the worker's microbatch (a dict of tensors) into NeMo-RL's
    `BatchedDataDict`; it is injected so this class imports no NeMo-RL module.
    """

    loss_fn: NemoRLLoss
    wrap: Callable[[Mapping[str, torch.Tensor]], Any] = dict
    raw_metrics: list[dict[str, Any]] = field(default_factory=list)

    def __call__(
        self, logprobs: torch.Tensor, microbatch: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        """The loss SUM over the microbatch (NeMo-RL's loss at global counts 1)."""
        one = torch.ones((), dtype=torch.float32, device=logprobs.device)
        loss, metrics = self.loss_fn(logprobs, self.wrap(microbatch), one, one)
        self.raw_metrics.append(dict(metrics))
        return loss

    def take(
        self,
        global_valid_toks: float,
        global_valid_seqs: float,
        num_global_batches: int,
        extra: Mapping[str, float] | None = None,
    ) -> list[dict[str, Any]]:
        """This optimizer step's per-microbatch metrics as NeMo-RL's Megatron worker reports them.

        Each metric divided by its global count, then by the number of optimizer steps in the
        `train` call (extrema untouched), plus `extra` (lr, wd) and the two global counts;
        clears the record.
        """
        denominators = {"tokens": global_valid_toks, "sequences": global_valid_seqs, "none": 1.0}
        out = []
        for raw in self.raw_metrics:
            row: dict[str, Any] = {}
            for name, value in raw.items():
                if name.endswith(("_min", "_max")):
                    row[name] = value
                    continue
                denominator = denominators[normaliser(self.loss_fn, name)] or 1.0
                row[name] = value / denominator / num_global_batches
            row.update(extra or {})
            row["global_valid_toks"] = global_valid_toks
            row["global_valid_seqs"] = global_valid_seqs
            out.append(row)
        self.raw_metrics = []
        return out
