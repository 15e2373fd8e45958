"""Figures for the policy worker on CPU (gloo). At DP=2: parity max abs diff vs plain
PyTorch, gradient bytes reduced per optimizer step / grad buffer, split vs one-shot step
time. At TP=2: logprob and post-step parameter diffs vs plain PyTorch at TP=1. With --tests,
the wall time of `pytest tests/integration`.

Run: .venv/bin/python benchmarks/bench_worker.py [--steps N] [--tests]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The test harness is imported as the `tests` package of this checkout.
sys.path.insert(0, str(ROOT))

STEPS = 5


def measure() -> dict[str, float]:
    """One rank's figures (called on both ranks by the spawn)."""
    import torch.distributed as dist
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
    worker = MegatronPolicyWorker(tiny_config(level="token", overlap=True))
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
    args = parser.parse_args()
    STEPS = args.steps
    from tests.integration.worker.harness import spawn2
    from tests.support.ports import free_port

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
