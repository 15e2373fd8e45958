"""Per-step metrics: metrics.jsonl (one JSON object per step), the log line, the summary
(the plot: `metrics_plot`)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

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
    - ``grad_norm``: the last optimizer step's gradient norm before clipping (what
      megatron-core's optimizer step returns; NeMo-RL's Megatron worker reports the same);
    - ``approx_entropy``, ``gen_kl_error``, ``probs_ratio``, ``probs_ratio_clamped``: the
      same sum of each step's token mean (`loss.sampler_diagnostics`).

    ``kl`` is this project's own: the mean KL of the policy to the reference over all
    response tokens of the step, BEFORE its update (the k-type of ``loss_fn``); at KL
    coefficient 0 only where the reference forward was asked for (`RunConfig.
    skips_reference_logprobs`), else 0. ``clip_fraction`` is also ours: the share of
    the step's response tokens (all optimizer steps) whose ratio the clip decided. ``lr``:
    the learning rate the step trained with (NeMo-RL logs it read before its scheduler ticks).
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
        "lr": replica_results[0].lr,
        **token_metrics(replica_results, tokens),
        **moe_metrics(replica_results[0].moe),
    }


def token_metrics(
    replica_results: Sequence[TrainResult], tokens: Sequence[float]
) -> dict[str, float]:
    """The loss's token-normalised metrics of a GRPO step from each replica's raw sums per
    optimizer step (`tokens[k]`: step k's response tokens over all replicas). NeMo-RL's
    metrics are each step's token mean summed over the optimizer steps; our
    ``clip_fraction`` is the share of all the step's tokens."""
    per_step = [r.token_metric_sums for r in replica_results]
    if not per_step[0]:
        return {}
    out: dict[str, float] = {}
    for name in per_step[0][0]:
        sums = [sum(rank[k][name] for rank in per_step) for k in range(len(tokens))]
        if name == "clip_fraction":
            out[name] = sum(sums) / max(sum(tokens), 1.0)
        else:
            out[name] = sum(s / max(t, 1.0) for s, t in zip(sums, tokens, strict=True))
    return out


def rollout_metrics(
    rewards: Sequence[float], group_size: int, response_lengths: Sequence[int]
) -> dict[str, float]:
    """What the step's samples say before training: NeMo-RL's ``mean_gen_tokens_per_sample``
    (its rollouts' generated tokens per sample) and this project's
    ``frac_groups_with_reward_signal``: the share of prompt groups whose rewards vary (a
    non-zero std, NeMo-RL's dynamic-sampling test). A group whose samples all score the same
    has zero advantage, so it teaches nothing: when this falls, learning stops."""
    groups = [rewards[i : i + group_size] for i in range(0, len(rewards), group_size)]
    varied = sum(1 for g in groups if max(g) != min(g))
    return {
        "mean_gen_tokens_per_sample": sum(response_lengths) / len(response_lengths),
        "frac_groups_with_reward_signal": varied / len(groups),
    }


def truncation_metrics(is_truncated: torch.Tensor, scores: torch.Tensor) -> dict[str, float]:
    """NeMo-RL's ``truncation_rate`` (the share of samples that spent the token budget without
    a stop token) and this project's ``truncated_correct_rate``: the share of samples that did
    not stop yet the verifier scored correct (before any shaping). When that share is not 0,
    not stopping costs nothing: a verifier reading the last answer line pays a response cut
    off after it (`mcore_grpo.grpo.algorithm.reward_shaping`)."""
    n = len(is_truncated)
    return {
        "truncation_rate": float(is_truncated.sum()) / n,
        "truncated_correct_rate": float((is_truncated & (scores == 1.0)).sum()) / n,
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
    losses = [key for key in per_optimizer_step[0] if key.endswith("_loss")]
    return {
        **{key: sum(m[key] for m in per_optimizer_step) / n for key in losses},
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
            f"| entropy {record['approx_entropy'] / max(record['optimizer_steps'], 1.0):.3f} "
            f"clipped {record['clip_fraction']:.3f} "
            f"signal {record['frac_groups_with_reward_signal']:.2f} "
            f"len {record['mean_gen_tokens_per_sample']:.1f} "
            + (f"cut {record['truncation_rate']:.2f} " if "truncation_rate" in record else "")
            if "approx_entropy" in record and "frac_groups_with_reward_signal" in record
            else ""
        )
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
