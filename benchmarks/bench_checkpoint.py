"""Checkpoint cost of the default period on `cpu-tiny`: seconds per save, % of step time.

    uv run python benchmarks/bench_checkpoint.py [--steps 20] [--workers 1] [key=value ...]

Runs the cpu-tiny preset (shortened to --steps steps) with checkpoints on at the preset's
`checkpointing.save_period` and times every save (the workers' serialise + hash + fsync, then
meta.json, rename, `latest`, pruning) against the mean step time of the steps after the first.
The figure the default period is chosen by: save time / (period x step time) must stay < 5 %.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from mcore_grpo.grpo.config.config_loader import load_config
from mcore_grpo.grpo.driver.loop import GRPOLoop
from mcore_grpo.grpo.ranks.messages import TaskTokens
from mcore_grpo.grpo.ranks.runner import LocalRunner, RayRunner, Runner
from mcore_grpo.grpo.tasks.task import build_task


class TimedLoop(GRPOLoop):
    """The GRPO loop with each save timed."""

    saves: list[float]

    def save(self, step: int) -> Path:
        start = time.perf_counter()
        path = super().save(step)
        self.saves.append(time.perf_counter() - start)
        return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    config = load_config(overrides=[f"grpo.max_num_steps={args.steps}", *args.overrides])
    task = build_task(config.task.name, config.task.max_addend, config.task.num_terms)
    tokens = TaskTokens(task.vocab_size, task.pad_id, task.eos_id)
    runner: Runner = (
        LocalRunner(config, tokens)
        if args.workers == 1
        else RayRunner(config, tokens, args.workers)
    )
    with tempfile.TemporaryDirectory() as tmp:
        loop = TimedLoop(config, task, runner, Path(tmp))
        loop.saves = []
        try:
            result = loop.run(progress=False)
        finally:
            runner.shutdown()
        dirs = list(Path(tmp, "checkpoints").glob("step_*"))
        size = sum(f.stat().st_size for d in dirs for f in d.glob("*.pt")) / len(dirs)
    steps: list[dict[str, Any]] = result.records[1:]
    step_s = statistics.mean(r["step_time_s"] for r in steps)
    save_s = statistics.mean(loop.saves)
    period = config.checkpointing.save_period
    print(f"cpu-tiny, {args.workers} worker(s), {args.steps} steps, save_period {period}")
    print(f"  step time (mean of steps 2..):      {step_s:.3f} s")
    print(
        f"  save time (mean of {len(loop.saves)} saves):        {save_s:.3f} s ({size / 1e6:.2f} MB each)"
    )
    print(
        f"  cost per step at this period:      {100 * save_s / (period * step_s):.2f} % of step time"
    )
    print(f"  cost if saving every step:         {100 * save_s / step_s:.1f} % of step time")


if __name__ == "__main__":
    main()
