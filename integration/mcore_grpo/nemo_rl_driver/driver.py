"""``mcore-grpo --driver nemo-rl``: NeMo-RL's `grpo_train` drives the worker end to end.

Where the two drivers differ and where they are the same is in docs/grpo.md ("Two drivers").
This module: check NeMo-RL is there (one clear error where it is not; never a fallback to
our loop), build the pieces (`setup.setup_run`), train, read NeMo-RL's logged rewards back.
"""

from __future__ import annotations

import logging
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from mcore_grpo.config.schema import RunConfig
from mcore_grpo.grpo.cluster import placement
from mcore_grpo.grpo.nemo_rl import source
from mcore_grpo.run_output import upstream_output

log = logging.getLogger("mcore_grpo")


@dataclass
class NemoRLResult:
    """A finished run: NeMo-RL's reward per step, where its logs went, the wall time."""

    rewards: list[float]
    log_dir: Path
    wall_s: float
    hf_path: Path | None = None  # the trained policy in Hugging Face format, when exported


def source_description() -> str:
    """``<path> @ <commit>`` of the NeMo-RL tree in use (commit ``unknown`` without git)."""
    root = source.source_root()
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=8", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        head = "unknown"
    return f"{root} @ {head}"


def latest_checkpoint(output_dir: Path) -> tuple[int, Path] | None:
    """(step, directory) of NeMo-RL's newest finished checkpoint (``checkpoints/step_<n>``:
    its `CheckpointManager` writes ``tmp_step_<n>`` and renames it when complete). The rule of
    its `get_latest_checkpoint_path`; that manager needs the run's whole checkpointing config,
    which only `setup_run` builds, and the abort line is written after setup is gone."""
    root = output_dir / "checkpoints"
    steps = [
        (int(d.name.removeprefix("step_")), d)
        for d in (root.iterdir() if root.is_dir() else [])
        if d.name.startswith("step_") and d.name.removeprefix("step_").isdigit()
    ]
    return max(steps) if steps else None


def run(
    config: RunConfig,
    workers: int,
    output_dir: Path,
    export_hf: Path | None = None,
    *,
    resume: bool = False,
) -> NemoRLResult:
    """Train with NeMo-RL's `grpo_train`; raises `source.NemoRLUnavailable` without NeMo-RL.
    `export_hf`: where the policy goes in Hugging Face format after training; `resume`: from
    the newest NeMo-RL checkpoint in `output_dir`."""
    start = time.perf_counter()
    with upstream_output():  # importing NeMo-RL prints ("grouped_gemm is not available ...")
        source.check_importable()
    log.info(
        "mcore-grpo: driver nemo-rl: nemo_rl.algorithms.grpo.grpo_train from %s",
        source_description(),
    )
    from mcore_grpo.nemo_rl_driver.run_metrics import reward_curve
    from mcore_grpo.nemo_rl_driver.setup import setup_run

    # NeMo-RL's prints (its step report, memory trackers, "Max number of steps has been
    # reached ...") and Ray's forwarding of the actors' output: held back like the rest, in
    # the output directory's file as they come.
    output_dir.mkdir(parents=True, exist_ok=True)
    with upstream_output():
        pieces = setup_run(config, workers, output_dir, resume=resume)
        if resume:
            log.info("resumed from step %d", pieces.save_state.current_step)
        hf_path = None
        try:
            log.info("mcore-grpo: %s", placement.record(pieces.policy.runner.places, output_dir))
            pieces.train()
            if export_hf is not None:
                hf_path = Path(pieces.policy.export_hf(str(export_hf.resolve())))
                log.info("policy exported in Hugging Face format: %s", hf_path)
        finally:
            pieces.shutdown()
    log_dir = Path(pieces.master_config.logger["log_dir"])
    return NemoRLResult(reward_curve(log_dir), log_dir, time.perf_counter() - start, hf_path)
