"""A finished `mcore-grpo` run's held-out curve into docs/grpo-seeds.json (issue 60), and the plot.

    uv run python benchmarks/grpo_seeds.py [RUN_DIR ...] [--trl ACCURACY_JSON NAME]
        [--json docs/grpo-seeds.json] [--plot docs/img/grpo-seeds.png] [--note TEXT]

``--trl`` takes the TRL side of a `bench_trl.py --accuracy-minutes` result (its ``--json``) as
an entry ``{"side": "trl", "run": NAME, ...}``: its setting is the preset with that run's
overrides (the same keys TRL's `GRPOConfig` was derived from), its minutes the same GRPO-step
time, its grades the same 200 held-out problems under `transformers` greedy generation.

Each run becomes one entry ``{"side": "ours", "setting": {...}, "seed": N, "minutes": [...],
"accuracy": [...], ...}``: minutes are GRPO-step time (the sum of `step_time_s` up to the
grade; the grades' own time is not counted, as in the TRL race), 0 for the grade before
training. Beside each grade: the share of responses that ran to the token budget and the
accuracy by operation (`+`, `-`, `*`), read from validation_samples.jsonl. An entry with the
same run name is replaced. The setting lists the config values the runs are compared on.

The plot has two panels: our runs at the preset's own setting (the seeds) with their mean, and
every other run (the sweep's points, TRL's).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
# bench_trl.PRESET (a script here cannot import the benchmarks package; a test keeps them equal).
PRESET = "cpu-smollm2-arith"
SETTING_KEYS = {
    "lr": ("policy", "megatron_cfg", "optimizer", "lr"),
    "weight_decay": ("policy", "megatron_cfg", "optimizer", "weight_decay"),
    "reference_policy_kl_penalty": ("loss_fn", "reference_policy_kl_penalty"),
    "stop_properly_penalty_coef": ("grpo", "reward_shaping", "stop_properly_penalty_coef"),
    "reward_shaping": ("grpo", "reward_shaping", "enabled"),
    "lr_warmup_iters": ("policy", "megatron_cfg", "scheduler", "lr_warmup_iters"),
    "train_problems": ("task", "arithmetic", "train_problems"),
    "base_share": ("task", "arithmetic", "base_share"),
    "num_prompts_per_step": ("grpo", "num_prompts_per_step"),
    "num_generations_per_prompt": ("grpo", "num_generations_per_prompt"),
    "max_new_tokens": ("policy", "generation", "max_new_tokens"),
}
QUESTION = re.compile(r"What is (-?\d+) ([-+*]) (-?\d+)\?")


def _get(config: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = config
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def by_operation(samples: list[dict[str, Any]]) -> dict[str, float]:
    """Accuracy per arithmetic operation of one grade's samples."""
    counts: dict[str, list[float]] = defaultdict(list)
    for sample in samples:
        match = QUESTION.search(sample.get("question", ""))
        if match:
            counts[match.group(2)].append(float(sample["score"] == 1.0))
    return {op: round(sum(v) / len(v), 3) for op, v in sorted(counts.items())}


def entry(run: Path, note: str) -> dict[str, Any]:
    """The curve of one finished run directory."""
    config = yaml.safe_load((run / "config.yaml").read_text())
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    samples: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for line in (run / "validation_samples.jsonl").read_text().splitlines():
        sample = json.loads(line)
        samples[int(sample["step"])].append(sample)
    minutes, accuracy, steps, cut, ops = [], [], [], [], []
    elapsed = 0.0
    first = records[0]
    if "validation/accuracy_at_start" in first:
        minutes.append(0.0)
        accuracy.append(first["validation/accuracy_at_start"])
        steps.append(0)
        cut.append(None)
        ops.append(by_operation(samples[0]))
    for record in records:
        elapsed += record["step_time_s"]
        if "validation/accuracy" in record:
            minutes.append(round(elapsed / 60, 2))
            accuracy.append(record["validation/accuracy"])
            steps.append(record["step"])
            cut.append(record.get("validation/truncation_rate"))
            ops.append(by_operation(samples[record["step"]]))
    return {
        "side": "ours",
        "run": run.name,
        "setting": setting_of(config),
        "seed": _get(config, ("grpo", "seed")),
        "minutes": minutes,
        "accuracy": accuracy,
        "steps": steps,
        "validation_truncation_rate": cut,
        "by_operation": ops,
        "reward_mean": [round(r["reward_mean"], 4) for r in records],
        "truncation_rate": [r.get("truncation_rate") for r in records],
        "truncated_correct_rate": [r.get("truncated_correct_rate") for r in records],
        "note": note,
    }


def preset_config(overrides: list[str]) -> dict[str, Any]:
    """The preset with `overrides`, resolved by the config loader, as plain data."""
    from mcore_grpo.config.loader import dump_yaml, load_config

    return yaml.safe_load(dump_yaml(load_config(PRESET, None, overrides)))


def setting_of(config: dict[str, Any]) -> dict[str, Any]:
    """The values runs are compared on (`SETTING_KEYS`) of a resolved config."""
    return {name: _get(config, path) for name, path in SETTING_KEYS.items()}


def trl_entry(result: Path, name: str, note: str) -> dict[str, Any]:
    """The TRL side of a `bench_trl.py --accuracy-minutes` JSON as an entry."""
    doc = json.loads(result.read_text())
    if "trl" not in doc.get("sides", {}):
        raise SystemExit(f"grpo_seeds: {result} has no TRL side (run bench_trl with --side trl)")
    side = doc["sides"]["trl"]
    config = preset_config(list(doc["overrides"]))
    return {
        "side": "trl",
        "run": name,
        "setting": setting_of(config),
        "seed": _get(config, ("grpo", "seed")),
        "minutes": [round(seconds / 60, 2) for seconds, _ in side["curve"]],
        "accuracy": [accuracy for _, accuracy in side["curve"]],
        "steps_run": side["steps_run"],
        "by_operation": side["accuracy_by_operation"],
        "reward_mean": [round(r, 4) for r in side["rewards"]],
        "note": note,
    }


def seed_means(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per setting of our side with more than one seed: the mean and the worst seed at each
    grade step all of its runs took (grades are per step, so the minutes are averaged too)."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        if e["side"] == "ours" and "steps" in e:
            groups[json.dumps(e["setting"], sort_keys=True)].append(e)
    means = []
    for runs in groups.values():
        if len({e["seed"] for e in runs}) < 2:
            continue
        grades = [
            dict(zip(e["steps"], zip(e["minutes"], e["accuracy"], strict=True), strict=True))
            for e in runs
        ]
        rows = []
        for step in sorted(set.intersection(*(set(g) for g in grades))):
            minutes = [g[step][0] for g in grades]
            accuracy = [g[step][1] for g in grades]
            worst = min(range(len(runs)), key=accuracy.__getitem__)
            rows.append({
                "step": step,
                "minutes": round(sum(minutes) / len(runs), 2),
                "accuracy": round(sum(accuracy) / len(runs), 4),
                "worst": accuracy[worst],
                "worst_seed": runs[worst]["seed"],
            })  # fmt: skip
        means.append(
            {"setting": runs[0]["setting"], "seeds": [e["seed"] for e in runs], "rows": rows}
        )
    return means


def _label(e: dict[str, Any]) -> str:
    """A run's legend entry: side, name, seed and the values the sweep varies."""
    s = e["setting"]
    stop = s["stop_properly_penalty_coef"] if s["reward_shaping"] else "off"
    return (
        f"{e['side']} {e['run']} (seed {e['seed']}): lr {s['lr']}, "
        f"KL {s['reference_policy_kl_penalty']}, stop penalty {stop}"
    )


def split_by_setting(
    entries: list[dict[str, Any]], shipped: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Our runs at the `shipped` setting (the seeds), and every other run (sweep points, TRL)."""
    at: list[dict[str, Any]] = []
    other: list[dict[str, Any]] = []
    for e in entries:
        (at if e["side"] == "ours" and e["setting"] == shipped else other).append(e)
    return at, other


def _mean_label(mean: dict[str, Any]) -> str:
    """A mean curve's legend entry: its seeds and the setting's learning rate and KL."""
    s = mean["setting"]
    seeds = ", ".join(map(str, mean["seeds"]))
    return f"mean of seeds {seeds}: lr {s['lr']}, KL {s['reference_policy_kl_penalty']}"


def panels(
    entries: list[dict[str, Any]], shipped: dict[str, Any]
) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """The plot's two panels, each its runs and the means over seeds of its settings with more
    than one seed: the shipped setting's seeds on the left, every other run on the right (a
    candidate setting's seeds get their mean there)."""
    return [(runs, seed_means(runs)) for runs in split_by_setting(entries, shipped)]


def plot(entries: list[dict[str, Any]], shipped: dict[str, Any], path: Path) -> None:
    """Held-out accuracy against GRPO-step minutes: on the left our runs at the `shipped`
    setting and their mean over seeds, on the right every other run (and the mean of any
    other setting run with several seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (seeds, others) = plt.subplots(1, 2, figsize=(13, 6.4), sharey=True)
    for ax, (runs, means) in zip((seeds, others), panels(entries, shipped), strict=True):
        for e in runs:
            style = "-" if e["side"] == "ours" else "--"
            ax.plot(e["minutes"], e["accuracy"], marker="o", ms=3, ls=style, label=_label(e))
        for mean in means:
            rows = mean["rows"]
            ax.plot(
                [r["minutes"] for r in rows],
                [r["accuracy"] for r in rows],
                color="black",
                lw=2.5,
                label=_mean_label(mean),
            )
    seeds.set_title("the preset as shipped: seeds and their mean", fontsize="small")
    others.set_title("other settings (sweep points, candidates) and TRL", fontsize="small")
    for ax in (seeds, others):
        ax.axhline(0.6, color="grey", lw=0.6, ls="--")
        ax.set_xlabel("GRPO-step minutes (2 CPU cores)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="xx-small", loc="upper center", bbox_to_anchor=(0.5, -0.13))
    seeds.set_ylabel("held-out accuracy (200, greedy)")
    seeds.set_ylim(-0.02, 1.02)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="*", help="finished run directories")
    parser.add_argument(
        "--trl",
        nargs=2,
        action="append",
        default=[],
        metavar=("ACCURACY_JSON", "NAME"),
        help="the TRL side of a bench_trl --accuracy-minutes result, as run NAME",
    )
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "grpo-seeds.json")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "grpo-seeds.png")
    parser.add_argument("--note", default="", help="how the run was made (machine, load)")
    args = parser.parse_args()
    if not args.runs and not args.trl:
        parser.error("name at least one run directory or --trl result")
    kept = json.loads(args.json.read_text()) if args.json.exists() else []
    new = [entry(run, args.note) for run in args.runs]
    new += [trl_entry(Path(result), name, args.note) for result, name in args.trl]
    names = {e["run"] for e in new}
    entries = [e for e in kept if e.get("run") not in names] + new
    args.json.write_text(json.dumps(entries, indent=1) + "\n")
    plot(entries, setting_of(preset_config([])), args.plot)
    for e in new:
        print(f"{e['run']}: minutes {e['minutes']} accuracy {e['accuracy']}")
        print(f"  by operation {e['by_operation']}")
    for mean in seed_means(entries):
        print(f"{_mean_label(mean)}; per grade step, the mean (worst seed):")
        for r in mean["rows"]:
            print(
                f"  step {r['step']:3d}  {r['minutes']:6.2f} min  {r['accuracy']:.3f} "
                f"(worst {r['worst']:.3f}, seed {r['worst_seed']})"
            )
    print(f"wrote {args.json} ({len(entries)} runs) and {args.plot}")


if __name__ == "__main__":
    main()
