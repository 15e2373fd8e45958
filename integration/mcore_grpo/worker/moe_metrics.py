"""What mixture-of-experts users watch, per optimizer step: router losses and expert load.

NeMo-RL's names where it has the metric (its Megatron worker's `get_moe_metrics`, logged by
`grpo_train` as ``moe/<name>``), ours beside them:

- ``moe/load_balancing_loss`` / ``moe/seq_load_balancing_loss`` /
  ``moe/global_load_balancing_loss`` / ``moe/z_loss``: the load-balancing (switch) loss of each
  balancing type (0 for the types the router does not use) and the router z-loss, unscaled by
  their coefficients, as megatron-core's routers record them into its
  `MoEMetricsTracker` during training forwards; mean over layers and microbatches, then over
  data-parallel ranks (as NeMo-RL's `get_moe_metrics` reduces them).
- ``moe/tokens_per_expert``: routing assignments each expert received over the step, summed
  over layers and data-parallel ranks (top-k counts every assignment; padding counts none, a
  shared-prefix token once per sample it stands for, `token_weights`); ``moe/load_imbalance``:
  the busiest expert's share over the even share (1.0 = balanced).
- ``moe/dropped_tokens``: assignments dropped for capacity (0 when dropless).

Counts come from a forward hook on each `TopKRouter` (its ``routing_map`` after capacity
dropping), taken only in training forwards so logprob passes do not count twice.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

# megatron-core's tracker name -> ours (NeMo-RL's `moe/<name>`): the load-balancing loss of
# each type a router may use (aux_loss, seq_aux_loss, global_aux_loss; 0 when not used), and the
# z-loss.
TRACKED = {
    name: f"moe/{name}"
    for name in (
        "load_balancing_loss",
        "seq_load_balancing_loss",
        "global_load_balancing_loss",
        "z_loss",
    )
}


def token_weights(inputs: tuple[Any, ...], tokens: int, device: torch.device) -> torch.Tensor:
    """[tokens] float64: what each routed token counts for, from the router's inputs
    (hidden_states, padding_mask, token_sequences): the samples a shared-prefix token stands
    for (megatron-core's `TokenSequences.counts`, patches/Megatron-LM/
    shared-prefix-moe-token-counts.patch), else 0 for padding and 1 for the rest, as the
    router's own losses count them."""
    padding = inputs[1] if len(inputs) > 1 else None
    sequences = inputs[2] if len(inputs) > 2 else None
    if sequences is not None:
        weights = sequences.counts.detach().reshape(-1).to(torch.float64)
        return weights if padding is None else weights * ~padding.reshape(-1)
    if padding is not None:
        return (~padding.detach().reshape(-1)).to(torch.float64)
    return torch.ones(tokens, dtype=torch.float64, device=device)


class RouterStats:
    """Per-step expert-load counters fed by hooks on the model's routers."""

    def __init__(self, model: torch.nn.Module, num_experts: int, topk: int) -> None:
        from megatron.core.transformer.moe.router import TopKRouter

        self.num_experts = num_experts
        self.topk = topk
        self._routers = [m for m in model.modules() if isinstance(m, TopKRouter)]
        if not self._routers:
            raise ValueError("RouterStats: the model has no megatron-core TopKRouter")
        self._handles = [r.register_forward_hook(self._count) for r in self._routers]
        self._tokens = torch.zeros(num_experts, dtype=torch.float64)
        self._assignments = 0.0
        self._forwards = 0

    def _count(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if not (module.training and torch.is_grad_enabled()):
            return
        _, routing_map = output
        weights = token_weights(inputs, routing_map.shape[0], routing_map.device)
        counted = routing_map.detach().to(torch.float64) * weights[:, None]
        self._tokens += counted.sum(dim=0).cpu()
        self._assignments += float(weights.sum()) * self.topk
        self._forwards += 1

    def reset(self) -> None:
        """Forget the counts and megatron-core's tracked router losses (a new step)."""
        from megatron.core.transformer.moe.moe_logging import get_moe_metrics_tracker

        self._tokens.zero_()
        self._assignments = 0.0
        self._forwards = 0
        get_moe_metrics_tracker().clear()

    def collect(self, group: Any, device: torch.device) -> dict[str, Any]:
        """The step's metrics, reduced over `group` (the data-parallel ranks: each routes its
        own tokens); then `reset`. Collective: every rank of `group` calls it."""
        from megatron.core.transformer.moe.moe_logging import get_moe_metrics_tracker

        tracked = get_moe_metrics_tracker().metrics
        layers = max(1, len(self._routers))
        microbatches = max(1, self._forwards // layers)
        losses = [
            float(tracked[name].values.sum()) / (layers * microbatches) if name in tracked else 0.0
            for name in TRACKED
        ]
        counts = torch.cat(
            [
                self._tokens,
                torch.tensor([self._assignments], dtype=torch.float64),
                torch.tensor(losses, dtype=torch.float64),
            ]
        ).to(device)
        dist.all_reduce(counts, group=group)
        counts = counts.cpu()
        tokens = counts[: self.num_experts]
        assignments = float(counts[self.num_experts])
        ranks = dist.get_world_size(group)
        routed = float(tokens.sum())
        self.reset()
        metrics: dict[str, Any] = {
            metric: float(counts[self.num_experts + 1 + i]) / ranks
            for i, metric in enumerate(TRACKED.values())
        }
        metrics["moe/tokens_per_expert"] = [float(t) for t in tokens]
        metrics["moe/load_imbalance"] = (
            float(tokens.max()) * self.num_experts / routed if routed else 0.0
        )
        metrics["moe/dropped_tokens"] = assignments - routed
        return metrics

    def close(self) -> None:
        """Remove the hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
