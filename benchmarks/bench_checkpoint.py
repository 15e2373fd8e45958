"""Checkpoint cost of a preset's period: seconds per save, % of step time.

    uv run python benchmarks/bench_checkpoint.py [--preset cpu-tiny] [--steps 20] [--workers 1]
        [--step-time-s S] [key=value ...]

Runs the preset (shortened to --steps steps) with checkpoints on at its
`checkpointing.save_period` and times every save (the workers' serialise + hash + fsync, the
Hugging Face export where `save_consolidated` asks for it, then meta.json, rename, `latest`,
pruning) against the mean step time of the steps after the first. A real model's save does
not depend on the batch, so it can be timed on a shrunken step (fewer prompts, no held-out
evaluation) and set against the full preset's step time given as --step-time-s.
The figure the period is chosen by: save time / (period x step time) must stay under 5 % on
cpu-tiny and about 2 % on the real-model presets.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from mcore_grpo.config.loader import load_config
from mcore_grpo.grpo.driver.loop import GRPOLoop
from mcore_grpo.grpo.policy_model.hf_model import resolve_model
from mcore_grpo.grpo.ranks.messages import TaskTokens
from mcore_grpo.grpo.ranks.runner import LocalRunner, RayRunner, Runner
from mcore_grpo.grpo.tasks.math_task import make_task


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
    parser.add_argument("--preset", default="cpu-tiny")
    parser.add_argument("--step-time-s", type=float, default=None)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    config = load_config(
        args.preset, overrides=[f"grpo.max_num_steps={args.steps}", *args.overrides]
    )
    tmp_root = Path(tempfile.mkdtemp(prefix="bench_checkpoint_"))
    config = resolve_model(config, tmp_root)
    task = make_task(config)
    tokens = TaskTokens.of(task)
    runner: Runner = (
        LocalRunner(config, tokens)
        if args.workers == 1
        else RayRunner(config, tokens, args.workers)
    )
    try:
        loop = TimedLoop(config, task, runner, tmp_root / "run")
        loop.saves = []
        try:
            result = loop.run(progress=False)
        finally:
            runner.shutdown()
        dirs = list(Path(tmp_root, "run", "checkpoints").glob("step_*"))
        size = sum(f.stat().st_size for d in dirs for f in d.rglob("*") if f.is_file()) / len(dirs)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    steps: list[dict[str, Any]] = result.records[1:] or result.records
    measured_s = statistics.mean(r["step_time_s"] for r in steps)
    step_s = args.step_time_s or measured_s
    save_s = statistics.mean(loop.saves)
    period = config.checkpointing.save_period
    print(f"{args.preset}, {args.workers} worker(s), {args.steps} steps, save_period {period}")
    print(f"  step time (mean of steps 2..):      {measured_s:.3f} s (set against: {step_s:.1f} s)")
    print(f"  saves (s):                          {', '.join(f'{t:.1f}' for t in loop.saves)}")
    print(
        f"  save time (mean of {len(loop.saves)} saves):        {save_s:.3f} s ({size / 1e6:.2f} MB each)"
    )
    print(
        f"  cost per step at this period:      {100 * save_s / (period * step_s):.2f} % of step time"
    )
    print(f"  cost if saving every step:         {100 * save_s / step_s:.1f} % of step time")


if __name__ == "__main__":
    main()
