"""Per-step metrics: metrics.jsonl (one JSON object per step), the log line, the end plot."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mcore_grpo.grpo.ranks.messages import TrainResult

# Keys every metrics.jsonl record carries (the contract plus the time split).
REQUIRED_KEYS = (
    "step",
    "reward_mean",
    "loss",
    "kl",
    "step_time_s",
    "generation_time_s",
    "logprob_time_s",
    "training_time_s",
)


def train_metrics(replica_results: Sequence[TrainResult]) -> dict[str, float]:
    """The training metrics of one GRPO step from one `TrainResult` per data-parallel replica.

    NeMo-RL's names, meanings and aggregation (grpo.py ~3491 sums every per-microbatch metric
    over microbatches, replicas AND optimizer steps; each microbatch value is already
    divided by its optimizer step's global count):

    - ``loss``: the sum over optimizer steps of each step's global loss;
    - ``kl_penalty``: the same sum of the UNSCALED KL term of the loss (with the current
      policy's logprobs, as the loss saw them; 0 when beta = 0);
    - ``token_mult_prob_error``: the same sum of each step's mean of
      ``exp(|logp_train - logp_generation|)`` (1.0 per optimizer step = identical);
    - ``grad_norm``: the last optimizer step's gradient norm (NeMo-RL's worker reports one).

    ``kl`` is this project's own: the mean KL of the policy to the reference over all
    response tokens of the step, BEFORE its update (the k-type of ``loss_fn``).
    """
    steps = len(replica_results[0].loss)
    tokens = [sum(r.tokens[k] for r in replica_results) for k in range(steps)]
    prob_error = sum(
        sum(r.prob_error_sum[k] for r in replica_results) / max(tokens[k], 1.0)
        for k in range(steps)
    )
    kl_sum = sum(sum(r.kl_sum) for r in replica_results)
    return {
        "loss": sum(replica_results[0].loss),  # already reduced over replicas
        "kl_penalty": sum(sum(r.kl_penalty) for r in replica_results),
        "kl": kl_sum / max(sum(tokens), 1.0),
        "token_mult_prob_error": prob_error,
        "grad_norm": replica_results[0].grad_norm[-1],
        "optimizer_steps": float(steps),
        **moe_metrics(replica_results[0].moe),
    }


def moe_metrics(per_optimizer_step: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A GRPO step's router metrics from its optimizer steps' (none for a dense model): router
    losses averaged, expert token counts and drops summed, the imbalance of the sums."""
    if not per_optimizer_step:
        return {}
    n = len(per_optimizer_step)
    per_expert = zip(*(m["moe/tokens_per_expert"] for m in per_optimizer_step), strict=True)
    tokens = [sum(counts) for counts in per_expert]
    routed = sum(tokens)
    return {
        "moe/load_balancing_loss": sum(m["moe/load_balancing_loss"] for m in per_optimizer_step)
        / n,
        "moe/z_loss": sum(m["moe/z_loss"] for m in per_optimizer_step) / n,
        "moe/tokens_per_expert": tokens,
        "moe/load_imbalance": max(tokens) * len(tokens) / routed if routed else 0.0,
        "moe/dropped_tokens": sum(m["moe/dropped_tokens"] for m in per_optimizer_step),
    }


class MetricsWriter:
    """Appends one JSON line per step and fsyncs it, so a crash loses at most the open step."""

    def __init__(self, path: Path, *, truncate_after_step: int | None = None) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if truncate_after_step is not None and path.exists():
            # On resume drop records of steps after the checkpoint (they will be redone).
            # A run killed mid-write leaves a torn last line: only a step being redone.
            kept = [
                r for r in read_metrics(path, torn_tail=True) if r["step"] <= truncate_after_step
            ]
            tmp = path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
            os.replace(tmp, path)
        elif truncate_after_step is None:
            path.write_text("")

    def write(self, record: Mapping[str, Any]) -> None:
        """Append `record` (must hold `REQUIRED_KEYS`)."""
        missing = [k for k in REQUIRED_KEYS if k not in record]
        if missing:
            raise KeyError(f"metrics record for step {record.get('step')} lacks {missing}")
        with self.path.open("a") as f:
            f.write(json.dumps(dict(record), sort_keys=False) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def amend_last(self, extra: Mapping[str, Any]) -> None:
        """Add `extra` to the last record (figures measured after the last step, e.g. the
        exported checkpoint's accuracy); rewritten atomically."""
        records = read_metrics(self.path)
        if not records:
            raise ValueError(f"{self.path}: no record to amend")
        records[-1].update(extra)
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
        os.replace(tmp, self.path)


def read_metrics(path: Path, *, torn_tail: bool = False) -> list[dict[str, Any]]:
    """All records of a metrics.jsonl file (`torn_tail`: an unterminated last line, a write
    cut short by a kill, is dropped instead of refused)."""
    text = path.read_text()
    lines = text.splitlines()
    if torn_tail and lines and not text.endswith("\n"):
        lines = lines[:-1]
    records = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{lineno}: not a JSON record ({err})") from err
    return records


def step_line(record: Mapping[str, Any], max_steps: int) -> str:
    """The one log line per step (with the least accurate answer position, when recorded)."""
    worst = ""
    positions = record.get("position_accuracy")
    if positions:
        i = min(range(len(positions)), key=positions.__getitem__)
        worst = f"| worst position {i} {positions[i]:.2f} "
    return (
        f"step {record['step']:>3}/{max_steps} | reward {record['reward_mean']:.3f} "
        f"| loss {record['loss']:+.4f} | kl {record['kl']:.5f} {worst}"
        + (
            f"| aux {record['moe/load_balancing_loss']:.3f} imbalance {record['moe/load_imbalance']:.2f} "
            if "moe/load_balancing_loss" in record
            else ""
        )
        + "".join(
            f"| {label} {record[key]:.3f} "
            for key, label in (
                ("validation/accuracy_at_start", "held-out acc before"),
                ("validation/accuracy", "held-out acc"),
            )
            if key in record
        )
        + f"| gen {record['generation_time_s']:.2f}s lp {record['logprob_time_s']:.2f}s "
        f"train {record['training_time_s']:.2f}s | step {record['step_time_s']:.2f}s"
    )


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
    rewards = [r["reward_mean"] for r in records]
    losses = [r["loss"] for r in records]
    moe = "moe/load_balancing_loss" in records[0]
    fig, axes = plt.subplots(3 if moe else 2, 1, figsize=(7, 8.5 if moe else 6), sharex=True)
    ax_r, ax_l = axes[0], axes[1]
    ax_r.plot(steps, rewards, marker=".", alpha=0.5, label="reward mean")
    ax_r.plot(steps, moving_average(rewards, 5), label="5-step average")
    if "accuracy" in records[0]:
        ax_r.plot(steps, [r["accuracy"] for r in records], alpha=0.6, label="exact-answer rate")
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
        ax_r.plot(
            *zip(*exported, strict=True),
            marker="s",
            ls="",
            color="tab:orange",
            label="exported, transformers.generate",
        )
    if validation:
        ax_r.plot(
            *zip(*validation, strict=True),
            marker="o",
            color="black",
            label="held-out accuracy (greedy)",
        )
    ax_r.set_ylabel("reward")
    ax_r.set_ylim(-0.02, 1.02)
    ax_r.grid(alpha=0.3)
    ax_r.legend(loc="lower right")
    ax_l.plot(
        steps, losses, color="tab:red", marker=".", label="GRPO loss (sum over optimizer steps)"
    )
    ax_l.axhline(0.0, color="grey", lw=0.5)
    ax_l.set_ylabel("loss")
    ax_l.grid(alpha=0.3)
    ax_l.legend(loc="upper right")
    if moe:
        _plot_router(axes[2], steps, records)
    axes[-1].set_xlabel("GRPO step")
    fig.suptitle(title)
    fig.tight_layout()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path


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


def summarize(records: Sequence[Mapping[str, Any]], window: int = 5) -> dict[str, float]:
    """First/last-window reward means and mean step time, for the end-of-run line."""
    if not records:
        return {}
    rewards = [float(r["reward_mean"]) for r in records]
    w = min(window, len(rewards))
    times = [float(r["step_time_s"]) for r in records]
    held_out = {
        "held_out_before": records[0].get("validation/accuracy_at_start"),
        "held_out_after": records[-1].get("validation/accuracy"),
        "held_out_after_transformers": records[-1].get("validation/hf_accuracy"),
    }
    return {
        **{k: float(v) for k, v in held_out.items() if v is not None},
        "steps": float(len(records)),
        "reward_first": sum(rewards[:w]) / w,
        "reward_last": sum(rewards[-w:]) / w,
        "reward_max": max(rewards),
        "step_time_mean_s": sum(times) / len(times),
        "loss_last": float(records[-1]["loss"]),
        "kl_last": float(records[-1]["kl"]),
        "finite": float(all(math.isfinite(float(r["loss"])) for r in records)),
    }
