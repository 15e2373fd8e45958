"""`mcore-grpo` in a subprocess, as a user runs it (Ray and NeMo-RL have process-wide side
effects), and the marks of the end-to-end tests that need NeMo-RL's source."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from mcore_grpo.grpo.nemo_rl import source

F = TypeVar("F", bound=Callable[..., Any])


def needs_nemo_rl(test: F) -> F:
    """Marks a test `nemo_rl` and skips it, saying why, where NeMo-RL's source is absent."""
    skip = pytest.mark.skipif(
        not source.is_available(),
        reason=f"NeMo-RL is not installed (no {source.CHECKOUT} when synced: run tools/apply_patches.sh, then uv sync)",
    )
    return pytest.mark.nemo_rl(skip(test))


def run_cli_status(cwd: Path, *args: str, timeout: int = 1700) -> tuple[int, str]:
    """`python -m mcore_grpo.cli ARGS` in `cwd`: (exit status, stdout + stderr)."""
    run = subprocess.run(
        [sys.executable, "-m", "mcore_grpo.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=cwd,
    )
    return run.returncode, run.stdout + run.stderr


def run_cli(cwd: Path, *args: str, timeout: int = 1700) -> str:
    """`python -m mcore_grpo.cli ARGS` in `cwd`; its output, asserting exit status 0."""
    code, log = run_cli_status(cwd, *args, timeout=timeout)
    assert code == 0, log[-6000:]
    return log


def mean(values: list[float]) -> float:
    """Arithmetic mean (the first-5 / last-5 reward windows)."""
    return sum(values) / len(values)
