"""benchmarks/bench_gpu.py: no figures without CUDA; its code runs (CPU check) end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_gpu.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    # Without this process's torch.distributed variables: another test's group may hold the
    # MASTER_PORT they name.
    dist_vars = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    env = {k: v for k, v in os.environ.items() if k not in dist_vars}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600, env=env
    )


@pytest.mark.cpu_only(reason="checks what the benchmark says where there is no GPU")
def test_without_cuda_it_says_so_and_exits_0() -> None:
    out = _run()
    assert out.returncode == 0, out.stderr
    assert "needs CUDA" in out.stdout
    assert "tokens/s" not in out.stdout


@pytest.mark.cpu_only(reason="the CPU check runs megatron-core through the CPU redirects")
def test_cpu_check_runs_every_measurement() -> None:
    out = _run(
        "--cpu-check", "--rows", "4", "--seq", "12", "--mbs", "2", "--prompt", "4",
        "--new-tokens", "3", "--repeat", "1",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    assert "NOT GPU figures" in out.stdout
    for name in ("split train step", "one-shot train()", "get_logprobs", "generate"):
        line = next(x for x in out.stdout.splitlines() if x.startswith(f"| {name} |"))
        assert line.endswith("x |"), line
