"""Shared-prefix rows against whole rows: the logprob pass and the training pass of one GRPO
group (G samples of one prompt), on SmolLM2-135M's shape, at prompt / completion lengths.

Each (prompt, completion, layout) runs in a fresh process of its own, so its peak RSS
(`ru_maxrss`, minus the process's RSS once the model is built) is its own; on CUDA the peak
allocated memory instead. Timings are medians over `--repeat` passes after one warm-up. The
model has random weights (the speed of a pass does not depend on them); the completions end at
different lengths (a quarter of the group stops at half length), as sampled ones do. Both
passes score the completions only, as a run's training pass (its loss mask) and logprob passes
(NeMo-RL's token_mask) do: the LM head projects only those positions, in both layouts.

    uv run --no-sync python benchmarks/bench_shared_prefix.py
        [--prompts 128 512 2048 512 128 128] [--completion 48 48 48 512 1024 4096]
        [--layers 30] [--group 8] [--repeat 3] [--threads N] [--json FILE]

`--completion` takes one length for every prompt or one per prompt. Printed, never asserted,
with the token ratio G(P+C) / (P+GC) and the load average before and after (the machine may be
shared).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _smollm2_shape(sequence: int, layers: int) -> Any:
    from mcore_grpo.worker.config import ModelConfig

    return ModelConfig(
        num_layers=layers,
        hidden_size=576,
        num_attention_heads=9,
        num_query_groups=3,
        ffn_hidden_size=1536,
        vocab_size=49152,
        max_sequence_length=sequence,
        position_embedding_type="rope",
        rotary_base=100000,
        normalization="RMSNorm",
        swiglu=True,
        add_bias_linear=False,
        tie_embeddings=True,
    )


def _group(prompt: int, group: int, completion: int) -> tuple[Any, Any]:
    """[G, prompt + completion] ids and valid: one prompt, G completions, some ending early."""
    import torch

    g = torch.Generator().manual_seed(0)
    width = prompt + completion
    ids = torch.zeros(group, width, dtype=torch.long)
    valid = torch.zeros(group, width, dtype=torch.bool)
    ids[:, :prompt] = torch.randint(1, 49152, (prompt,), generator=g)
    for row in range(group):
        length = completion // 2 if row % 4 == 3 else completion
        ids[row, prompt : prompt + length] = torch.randint(1, 49152, (length,), generator=g)
        valid[row, : prompt + length] = True
    return ids, valid


def _child(
    prompt: int, group: int, completion: int, shared: bool, repeat: int, layers: int
) -> None:
    """One layout at one (prompt, completion): prints one JSON line per pass."""
    import torch
    import torch.distributed as dist
    from mcore_grpo.worker.config import WorkerConfig
    from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
    from mcore_grpo.worker.logprobs import policy_token_logprobs
    from mcore_grpo.worker.model import build_gpt
    from mcore_grpo.worker.shared_prefix import resolve

    device = "cuda" if torch.cuda.is_available() else "cpu"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("BENCH_PORT", "29533"))
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1)
    config = WorkerConfig(device=device, model=_smollm2_shape(prompt + completion, layers))
    with cpu_device(device):
        model_parallel_seed(0, device)
        _, gpt = build_gpt(config)
        if shared:
            resolve(True, gpt)  # refuses, naming why, where the rows would not be exact
        ids, valid = (t.to(device) for t in _group(prompt, group, completion))
        # As in a run: the loss (and the logprobs it compares with) read the completions only.
        scored = valid[:, 1:].clone()
        scored[:, : prompt - 1] = False

        def sync() -> None:
            if device == "cuda":
                torch.cuda.synchronize()

        def logprob_pass() -> None:
            with torch.no_grad():
                policy_token_logprobs(gpt, ids, valid, config, shared, scored)
            sync()

        def train_pass() -> None:
            logprobs, _ = policy_token_logprobs(gpt, ids, valid, config, shared, scored)
            logprobs.sum().backward()
            gpt.zero_grad(set_to_none=True)
            sync()

        base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        tokens = int(valid.sum()) if not shared else prompt + int(valid[:, prompt:].sum())
        figures: dict[str, Any] = {
            "prompt": prompt,
            "completion": completion,
            "shared": shared,
            "tokens": tokens,
        }
        for name, run in (("logprob_s", logprob_pass), ("train_s", train_pass)):
            run()
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            figures[name] = statistics.median(times)
            if device == "cuda":
                figures["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
            else:
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_rss
                figures["peak_mib"] = peak / 1024
            # After each pass: a later pass killed for memory leaves the earlier figures.
            print("RESULT " + json.dumps(figures), flush=True)


def _cells(whole: dict[str, Any], shared: dict[str, Any]) -> list[str]:
    """The table's cells for one prompt length; a failed layout shows its exit."""
    cells = []
    for key, fmt in (
        ("tokens", "{:.0f}"),
        ("logprob_s", "{:.2f}"),
        ("train_s", "{:.2f}"),
        ("peak_mib", "{:.0f}"),
    ):
        a, b = whole.get(key), shared.get(key)
        text = f"{fmt.format(a) if a is not None else whole.get('error', '-')} / "
        text += fmt.format(b) if b is not None else shared.get("error", "-")
        if a is not None and b is not None and key != "peak_mib":
            text += f" ({a / b:.2f}x)"
        cells.append(text)
    return cells


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Seconds per pass against prompt length, whole rows and shared rows, both passes (a layout
    that did not finish is left out of its line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    completion = 48  # the prompt-length sweep; other completion lengths are in the table only
    rows = [r for r in rows if r.get("completion", completion) == completion]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    passes = (("logprob_s", "logprob pass"), ("train_s", "training pass"))
    for ax, (key, title) in zip(axes, passes, strict=True):
        for shared, label in ((False, "whole rows"), (True, "shared-prefix rows")):
            points = sorted(
                (r["prompt"], r[key]) for r in rows if bool(r.get("shared")) == shared and key in r
            )
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("prompt tokens (G=8 samples of 48 new tokens)")
        ax.set_ylabel("seconds")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, nargs="+", default=[128, 512, 2048, 512, 128, 128])
    parser.add_argument("--completion", type=int, nargs="+", default=[48, 48, 48, 512, 1024, 4096])
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--plot", type=Path, default=None, help="also draw the figures here")
    parser.add_argument(
        "--from-json", type=Path, nargs="+", default=None, help="plot these runs' rows instead"
    )
    parser.add_argument("--child", nargs=6, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        prompt, group, completion, shared, repeat, layers = args.child
        _child(prompt, group, completion, bool(shared), repeat, layers)
        return
    completions = (
        args.completion * len(args.prompts) if len(args.completion) == 1 else args.completion
    )
    if len(completions) != len(args.prompts):
        parser.error(
            f"--completion takes one length or one per prompt ({len(args.prompts)}), "
            f"got {len(args.completion)}"
        )
    points = list(zip(args.prompts, completions, strict=True))
    if args.from_json:
        loaded = [row for f in args.from_json for row in json.loads(f.read_text())["rows"]]
        plot(loaded, args.plot or Path("shared-prefix-scaling.png"))
        return
    print(f"load average before: {os.getloadavg()}", flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(ROOT)}
    rows: list[dict[str, Any]] = []
    for prompt, completion in points:
        for shared in (0, 1):
            cmd = [sys.executable, __file__, "--child", str(prompt), str(args.group)]
            cmd += [str(completion), str(shared), str(args.repeat), str(args.layers)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
            row = json.loads(line[-1][len("RESULT ") :]) if line else {}
            row.update(prompt=prompt, completion=completion, shared=bool(shared))
            if out.returncode:
                # e.g. whole rows at a 2,048-token prompt: killed for memory (exit -9) on 24 GiB
                row["error"] = f"exit {out.returncode}"
                row.pop("peak_mib", None)  # the peak of the pass that died is unknown
            rows.append(row)
            print(f"  {rows[-1]}", flush=True)
    print(f"load average after: {os.getloadavg()}")
    print(f"\nG={args.group}, {args.layers} layers, {args.threads} threads")
    print(
        "| P / C | token ratio | tokens whole / shared | logprob pass s (whole / shared, x) "
        "| training pass s (whole / shared, x) | peak MiB (whole / shared) |"
    )
    print("|---|---|---|---|---|---|")
    for prompt, completion in points:
        whole, shared_row = (
            r for r in rows if (r["prompt"], r["completion"]) == (prompt, completion)
        )
        ratio = args.group * (prompt + completion) / (prompt + args.group * completion)
        cells = " | ".join(_cells(whole, shared_row))
        print(f"| {prompt} / {completion} | {ratio:.2f} | {cells} |")
    if args.plot is not None:
        plot(rows, args.plot)
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "group": args.group,
                    "layers": args.layers,
                    "threads": args.threads,
                    "rows": rows,
                },
                indent=1,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
