"""The run's plot: reward and held-out accuracy, the loss, what explains a run (entropy, KL to
the reference, clipping, groups with a reward signal, gradient norm, response length) and,
for a mixture-of-experts model, the router; from the metrics.jsonl records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over up to `window` values (for a readable reward curve)."""
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def plot_metrics(records: Sequence[Mapping[str, Any]], png_path: Path, title: str) -> Path:
    """Reward and loss against step, two panels, written as a PNG (Agg backend, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not records:
        raise ValueError(f"no metrics to plot into {png_path}")
    steps = [r["step"] for r in records]
    moe = "moe/load_balancing_loss" in records[0]
    explains = EXPLAINING[0] in records[0]
    panels = 2 + 2 * explains + moe
    fig, axes = plt.subplots(panels, 1, figsize=(7, 2.9 * panels + 0.3), sharex=True)
    _plot_reward(axes[0], steps, records)
    _plot_loss(axes[1], steps, records)
    if explains:
        _plot_policy_drift(axes[2], steps, records)
        _plot_sizes(axes[3], steps, records)
    if moe:
        _plot_router(axes[-1], steps, records)
    axes[-1].set_xlabel("GRPO step")
    fig.suptitle(title)
    fig.tight_layout()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path


def _plot_reward(ax: Any, steps: Sequence[int], records: Sequence[Mapping[str, Any]]) -> None:
    """The reward (raw and a 5-step average), the exact-answer rate and, where measured, the
    held-out accuracy: by the workers' greedy generation and the exported checkpoint's."""
    rewards = [r["reward_mean"] for r in records]
    ax.plot(steps, rewards, marker=".", alpha=0.5, label="reward mean")
    ax.plot(steps, moving_average(rewards, 5), label="5-step average")
    if "accuracy" in records[0]:
        ax.plot(steps, [r["accuracy"] for r in records], alpha=0.6, label="exact-answer rate")
    validation = [
        (0, r["validation/accuracy_at_start"])
        for r in records[:1]
        if "validation/accuracy_at_start" in r
    ]
    validation += [
        (r["step"], r["validation/accuracy"]) for r in records if "validation/accuracy" in r
    ]
    exported = [
        (r["step"], r["validation/hf_accuracy"]) for r in records if "validation/hf_accuracy" in r
    ]
    if exported:
        ax.plot(
            *zip(*exported, strict=True),
            marker="s",
            ls="",
            color="tab:orange",
            label="exported, transformers.generate",
        )
    if validation:
        ax.plot(
            *zip(*validation, strict=True),
            marker="o",
            color="black",
            label="held-out accuracy (greedy)",
        )
    ax.set_ylabel("reward")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")


def _plot_loss(ax: Any, steps: Sequence[int], records: Sequence[Mapping[str, Any]]) -> None:
    """The GRPO loss of each step, around a zero line."""
    ax.plot(
        steps,
        [r["loss"] for r in records],
        color="tab:red",
        marker=".",
        label="GRPO loss (sum over optimizer steps)",
    )
    ax.axhline(0.0, color="grey", lw=0.5)
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")


# The metrics that explain a run (issue 60), plotted when the records hold them.
EXPLAINING = (
    "approx_entropy",
    "kl",
    "clip_fraction",
    "frac_groups_with_reward_signal",
    "grad_norm",
    "mean_gen_tokens_per_sample",
)


def _plot_policy_drift(ax: Any, steps: Sequence[int], records: Sequence[Mapping[str, Any]]) -> None:
    """Entropy (per optimizer step: NeMo-RL sums it over them), KL to the reference, the
    clipped share, the groups that still teach and (where logged) the responses cut off at
    the token budget: collapse shows here first."""
    per_opt = [r["approx_entropy"] / max(r.get("optimizer_steps", 1.0), 1.0) for r in records]
    ax.plot(steps, per_opt, color="tab:blue", label="token entropy (approx_entropy / opt. step)")
    ax.plot(steps, [r["kl"] for r in records], color="tab:red", label="KL to reference (kl)")
    ax.plot(steps, [r["clip_fraction"] for r in records], color="tab:orange", label="clipped share")
    ax.plot(
        steps,
        [r["frac_groups_with_reward_signal"] for r in records],
        color="tab:green",
        label="groups with reward signal",
    )
    if "truncation_rate" in records[0]:
        ax.plot(
            steps,
            [r["truncation_rate"] for r in records],
            color="tab:gray",
            ls="--",
            label="responses cut off (truncation_rate)",
        )
    ax.set_ylabel("policy")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize="small")


def _plot_sizes(ax: Any, steps: Sequence[int], records: Sequence[Mapping[str, Any]]) -> None:
    """Gradient norm before clipping (left axis) and mean response length (right axis)."""
    ax.plot(steps, [r["grad_norm"] for r in records], color="tab:purple", label="grad_norm")
    ax.set_ylabel("grad norm (pre-clip)")
    ax.grid(alpha=0.3)
    right = ax.twinx()
    right.plot(
        steps,
        [r["mean_gen_tokens_per_sample"] for r in records],
        color="tab:brown",
        label="mean_gen_tokens_per_sample",
    )
    right.set_ylabel("response tokens")
    handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="upper right", fontsize="small")


def _plot_router(ax: Any, steps: Sequence[int], records: Sequence[Mapping[str, Any]]) -> None:
    """The MoE panel: the router's load-balancing loss and the busiest expert's load share."""
    ax.plot(
        steps, [r["moe/load_balancing_loss"] for r in records], color="tab:purple", label="aux loss"
    )
    ax.plot(
        steps,
        [r["moe/load_imbalance"] for r in records],
        color="tab:green",
        label="busiest expert / even share",
    )
    ax.axhline(1.0, color="grey", lw=0.5)
    ax.set_ylabel("router")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
