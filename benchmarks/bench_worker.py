"""Figures for the policy worker on CPU (gloo). At DP=2: parity max abs diff vs plain
PyTorch, gradient bytes reduced per optimizer step / grad buffer, split vs one-shot step
time on the tiny model. At TP=2: logprob and post-step parameter diffs vs plain PyTorch at
TP=1. With --tests, the wall time of `pytest tests/integration`.

`--fair`: the split step (begin, K x train_microbatch, finish) against the one-shot `train()`
over the SAME K microbatches (one schedule call of K), at DP=2, on a model where compute
dominates (4 layers, hidden 256, ffn 1024, vocab 1024, 4 x 128 tokens per microbatch per
rank), K = 1, 4, 8. The two modes alternate step by step (interleaved, so a load spike hits
both); printed: each mode's median over --steps steps, the median of the per-pair ratios
(split step i / one-shot step i, the figure least moved by a shared machine's load), and
the load average before and after.

Run: .venv/bin/python benchmarks/bench_worker.py [--steps N] [--tests] [--fair]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The test harness is imported as the `tests` package of this checkout.
sys.path.insert(0, str(ROOT))

STEPS = 5


def measure() -> dict[str, float]:
    """One rank's figures (called on both ranks by the spawn)."""
    import torch.distributed as dist
    from mcore_grpo.grpo.algorithm.loss import worker_default_loss
    from mcore_grpo.worker.comm_volume import count_gradient_reductions
    from mcore_grpo.worker.cpu import cpu_device
    from mcore_grpo.worker.model import sync_params
    from mcore_grpo.worker.policy_worker import MegatronPolicyWorker

    from tests.integration.worker.harness import (
        global_batch,
        local_grad_diff,
        param_diff,
        rank_slice,
        reference_step,
        tiny_config,
    )

    rank, world = dist.get_rank(), dist.get_world_size()
    batch = global_batch(rows=8)
    mine = rank_slice(batch, rank, world)
    out: dict[str, float] = {}
    config = tiny_config(level="token", overlap=True)
    worker = MegatronPolicyWorker(config, loss_sum_fn=worker_default_loss(config.loss))
    initial = {n: t.clone() for n, t in worker.reference.state_dict().items()}
    with count_gradient_reductions(worker.policy.ddp) as volume:
        worker.begin_train_step()
        for lo, hi in ((0, 1), (1, 3), (3, 4)):
            worker.train_microbatch({k: v[lo:hi] for k, v in mine.items()})
        worker.finish_train_step()
    out["bytes_reduced_ratio"] = volume.ratio
    grads, params = reference_step(worker, initial, batch)
    out["grad_max_abs_diff"] = local_grad_diff(worker, grads)
    with cpu_device("cpu"):
        sync_params(worker.policy)
    out["param_max_abs_diff"] = param_diff(worker, params)

    times: dict[str, list[float]] = {"split": [], "oneshot": []}
    for _ in range(STEPS):
        for mode in ("split", "oneshot"):
            dist.barrier()
            start = time.perf_counter()
            if mode == "split":
                worker.begin_train_step()
                worker.train_microbatch({k: v[:2] for k, v in mine.items()})
                worker.train_microbatch({k: v[2:] for k, v in mine.items()})
                worker.finish_train_step()
            else:
                worker.train(mine)
            times[mode].append(time.perf_counter() - start)
    out["split_step_ms"] = 1e3 * statistics.median(times["split"])
    out["oneshot_step_ms"] = 1e3 * statistics.median(times["oneshot"])
    return out


FAIR_K = (1, 4, 8)
FAIR_MBS, FAIR_SEQ, FAIR_VOCAB = 4, 128, 1024


def _fair_batch(rows: int, seed: int) -> dict[str, Any]:
    """Full-length GRPO rows: the first 16 tokens are the prompt, the rest trained."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, FAIR_VOCAB, (rows, FAIR_SEQ), generator=g)
    attn = torch.ones(rows, FAIR_SEQ)
    token_mask = attn.clone()
    token_mask[:, :16] = 0.0
    return {
        "input_ids": ids,
        "attention_mask": attn,
        "token_mask": token_mask,
        "sample_mask": torch.ones(rows),
        "advantages": torch.randn(rows, generator=g),
        "prev_logprobs": -7.0 + 0.1 * torch.randn(rows, FAIR_SEQ, generator=g),
    }


def measure_fair() -> dict[str, float]:
    """Split vs one-shot at the same K, one rank's medians (called on both DP ranks)."""
    import dataclasses

    import torch
    import torch.distributed as dist
    from mcore_grpo.grpo.algorithm.loss import worker_default_loss
    from mcore_grpo.worker.config import ModelConfig
    from mcore_grpo.worker.policy_worker import MegatronPolicyWorker

    from tests.integration.worker.harness import tiny_config

    # One thread per rank: 2 ranks on 2 cores, no thread pool waiting for a busy core.
    torch.set_num_threads(1)
    config = dataclasses.replace(
        tiny_config(level="token", overlap=False, mbs=FAIR_MBS),
        model=ModelConfig(
            num_layers=4,
            hidden_size=256,
            num_attention_heads=4,
            ffn_hidden_size=1024,
            vocab_size=FAIR_VOCAB,
            max_sequence_length=FAIR_SEQ,
        ),
    )
    worker = MegatronPolicyWorker(config, loss_sum_fn=worker_default_loss(config.loss))
    rank = dist.get_rank()
    out: dict[str, float] = {}
    for k in FAIR_K:
        batch = _fair_batch(k * FAIR_MBS, seed=rank)
        chunks = [
            {n: v[i * FAIR_MBS : (i + 1) * FAIR_MBS] for n, v in batch.items()} for i in range(k)
        ]
        times: dict[str, list[float]] = {"split": [], "oneshot": []}
        for step in range(STEPS + 1):  # the first round warms up both
            for mode in ("split", "oneshot"):
                dist.barrier()
                start = time.perf_counter()
                if mode == "split":
                    worker.begin_train_step()
                    for chunk in chunks:
                        worker.train_microbatch(chunk)
                    worker.finish_train_step()
                else:
                    worker.train(batch)
                if step:
                    times[mode].append(time.perf_counter() - start)
        out[f"K={k} split_ms"] = 1e3 * statistics.median(times["split"])
        out[f"K={k} oneshot_ms"] = 1e3 * statistics.median(times["oneshot"])
        out[f"K={k} pair_ratio"] = statistics.median(
            s / o for s, o in zip(times["split"], times["oneshot"], strict=True)
        )
    return out


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages (figures on a shared machine are read against
    them)."""
    import os

    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def init_world1() -> None:
    """This process as a 1-rank gloo world (the TP=1 reference builds megatron models)."""
    import os

    import torch.distributed as dist

    from tests.support.ports import free_port

    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1"
    )
    dist.init_process_group("gloo", rank=0, world_size=1)


def main() -> None:
    global STEPS
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=STEPS, help="timed steps per mode")
    parser.add_argument("--tests", action="store_true", help="also time pytest tests/integration")
    parser.add_argument(
        "--fair", action="store_true", help="only split vs one-shot at K = 1, 4, 8 (big model)"
    )
    args = parser.parse_args()
    STEPS = args.steps
    from tests.integration.worker.harness import spawn2
    from tests.support.ports import free_port

    if args.fair:
        print(f"load average (1 / 5 / 15 min) before: {load_average()}", flush=True)
        fair = spawn2(measure_fair, free_port())
        print(
            "| K | split step ms | one-shot train() ms | split / one-shot (medians) | "
            "median of interleaved pair ratios |"
        )
        print("|---|---|---|---|---|")
        for k in FAIR_K:
            split = max(fair[r][f"K={k} split_ms"] for r in fair)
            oneshot = max(fair[r][f"K={k} oneshot_ms"] for r in fair)
            pairs = max(fair[r][f"K={k} pair_ratio"] for r in fair)
            print(f"| {k} | {split:.0f} | {oneshot:.0f} | {split / oneshot:.3f} | {pairs:.3f} |")
        print(
            f"(max over the 2 DP ranks of each rank's median, {STEPS} interleaved steps per "
            f"mode; load average after: {load_average()})"
        )
        return

    start = time.perf_counter()
    results = spawn2(measure, free_port())
    print(f"DP=2 spawn (2 processes incl. megatron import): {time.perf_counter() - start:.1f} s")
    for key in results[0]:
        worst = max(results[r][key] for r in results)
        print(f"{key:>22}: {worst:.3g}  (max over ranks)")
    start = time.perf_counter()
    init_world1()
    from tests.integration.worker.tp_parity import compare_with_tp1

    tp = compare_with_tp1()
    print(f"TP=2 spawn + TP=1 reference: {time.perf_counter() - start:.1f} s")
    for key, value in tp.items():
        print(f"{key:>22}: {value:.3g}")
    if args.tests:
        start = time.perf_counter()
        rc = subprocess.call(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "tests/integration",
                "--ignore=tests/integration/grpo",
            ],
            cwd=ROOT,
        )
        print(
            f"pytest tests/integration (worker core): rc={rc}, {time.perf_counter() - start:.1f} s wall"
        )


if __name__ == "__main__":
    main()
