"""GRPO step time: the per-step split (generation / logprobs / training) and 1 vs 2 workers.

    uv run python benchmarks/bench_grpo.py [--steps 6] [key=value ...]

Runs the cpu-tiny preset (shortened to --steps steps, checkpointing off) with 1 Ray worker,
then 2 Ray workers, and prints the mean of each time component over the steps after the
first (the first step includes one-off warm-up). Figures depend on the machine and on what
else runs on it; on CPU the 2-worker run shares the same cores, so it shows the overhead of
the distributed path rather than a speed-up.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from mcore_grpo.config.loader import load_config
from mcore_grpo.grpo.driver.loop import GRPOLoop
from mcore_grpo.grpo.ranks.messages import TaskTokens
from mcore_grpo.grpo.ranks.runner import RayRunner
from mcore_grpo.grpo.tasks.task import build_task

COLUMNS = ("generation_time_s", "logprob_time_s", "training_time_s", "step_time_s")


def run(workers: int, overrides: list[str], out: Path) -> tuple[dict[str, float], float]:
    """Mean time split over steps 2.. for `workers` Ray workers, and the start-up time."""
    config = load_config(overrides=overrides)
    task = build_task(config.task.name, config.task.max_addend)
    tokens = TaskTokens(task.vocab_size, task.pad_id, task.eos_id)
    start = time.perf_counter()
    runner = RayRunner(config, tokens, workers)
    startup = time.perf_counter() - start
    try:
        result = GRPOLoop(config, task, runner, out).run(progress=False)
    finally:
        runner.shutdown()
    steady = result.records[1:] or result.records
    return {c: statistics.mean(r[c] for r in steady) for c in COLUMNS}, startup


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    overrides = [f"grpo.max_num_steps={args.steps}", "checkpointing.enabled=false"]
    overrides += args.overrides
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            rows[workers] = run(workers, overrides, Path(tmp) / f"w{workers}")
    config = load_config(overrides=overrides)
    print(
        f"\nGRPO cpu-tiny, {config.samples_per_step} samples/step, "
        f"{config.samples_per_step // config.policy.train_global_batch_size} optimizer "
        f"steps/step, mean over steps 2..{args.steps}"
    )
    print(f"{'workers':>7} | {'startup s':>9} | " + " | ".join(f"{c[:-2]:>15}" for c in COLUMNS))
    for workers, (times, startup) in rows.items():
        print(
            f"{workers:>7} | {startup:>9.1f} | " + " | ".join(f"{times[c]:>15.3f}" for c in COLUMNS)
        )
    ratio = rows[2][0]["step_time_s"] / rows[1][0]["step_time_s"]
    print(f"2-worker / 1-worker step time: {ratio:.2f}x")


if __name__ == "__main__":
    main()
