"""`mcore-grpo`: GRPO on the patched Megatron-Core tree.

    uv run mcore-grpo                                   # CPU preset, a few minutes on 2 cores
    uv run mcore-grpo --workers 2 grpo.max_num_steps=20
    uv run mcore-grpo --preset qwen2.5-1.5b-math --workers 4   # GPU machine
    uv run mcore-grpo --output-dir runs/cpu-tiny --resume grpo.max_num_steps=60
    uv run mcore-grpo --driver nemo-rl --workers 2      # NeMo-RL's grpo_train drives the worker
    uv run mcore-grpo --preset cpu-hf-tiny --export-hf runs/hf-out   # HF in, GRPO, HF out
    uv run mcore-grpo --preset qwen3-30b-a3b --dry-run   # layout + memory per GPU, on a CPU

Positional arguments are NeMo-RL style ``key=value`` overrides of the preset/config file.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from mcore_grpo.config.loader import DEFAULT_PRESET, load_config, preset_names
from mcore_grpo.config.schema import ConfigError, RunConfig, unused_settings
from mcore_grpo.grpo.cluster import placement
from mcore_grpo.grpo.cluster.placement import PlacementError
from mcore_grpo.grpo.driver.checkpoint import CheckpointError, latest_step
from mcore_grpo.grpo.driver.dry_run import check_layout
from mcore_grpo.grpo.driver.metrics import summarize
from mcore_grpo.grpo.policy_model.hf_model import is_hf_model, resolve_model
from mcore_grpo.grpo.ranks.messages import TaskTokens
from mcore_grpo.grpo.ranks.runner import WorkerFailed, make_runner
from mcore_grpo.grpo.ranks.worker_settings import sampling_params
from mcore_grpo.grpo.tasks.math_task import make_task
from mcore_grpo.grpo.tasks.task import Task
from mcore_grpo.run_output import (
    HeldBack,
    closing_line,
    console_logging,
    hold_back_into,
    upstream_output,
)

if TYPE_CHECKING:
    from mcore_grpo.grpo.driver.loop import RunResult

log = logging.getLogger("mcore_grpo")

# Fault injection for the runner's failure tests: "RANK:STEP" makes that worker raise at
# that step (tests/integration/grpo/ranks/test_runner.py). Not a user setting.
INJECT_FAILURE_ENV = "MCORE_GRPO_INJECT_FAILURE"

DRIVERS = ("mcore", "nemo-rl")
INTERRUPTED = 130


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


INTERRUPTING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def interrupt_on_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP unwind the run (workers shut down, exit 130). SIGINT too:
    a run started as a shell's background job inherits it ignored, and a scheduler's SIGTERM
    would otherwise end the driver without stopping its Ray workers."""
    for sig in INTERRUPTING:
        signal.signal(sig, _interrupt)


@contextlib.contextmanager
def signals_restored() -> Iterator[None]:
    """The handlers of `INTERRUPTING` as found, after a block that sets its own: a caller in
    the same process (a test, a notebook) keeps its Ctrl-C."""
    saved = {sig: signal.getsignal(sig) for sig in INTERRUPTING}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def injected_failure() -> tuple[int | None, int | None]:
    """(rank, step) from `INJECT_FAILURE_ENV`, or (None, None)."""
    value = os.environ.get(INJECT_FAILURE_ENV)
    if not value:
        return None, None
    rank, _, step = value.partition(":")
    return int(rank), int(step)


def aborted_message(
    err: WorkerFailed,
    output_dir: Path,
    step: int | None,
    argv: list[str],
    found: tuple[int, Path] | None = None,
) -> str:
    """The abort line: the cause, the step, the checkpoint to resume from and the command
    (a raised worker's traceback follows on the next lines). `found`: the checkpoint, where
    it is not ours (`latest_step`), e.g. NeMo-RL's."""
    cause, _, traceback = str(err).partition("\n")
    at = f" at step {step}" if step is not None else ""
    command = "mcore-grpo " + shlex.join([a for a in argv if a != "--resume"])
    found = found or latest_step(output_dir)
    if err.repeats is not None:
        then = f"every start fails with this {err.repeats}: {_repeating_fix(err.repeats)}"
    elif found is None:
        then = f"no checkpoint was saved yet; run again with: {command}"
    else:
        then = f"last checkpoint: step {found[0]} ({found[1]}); resume with: {command} --resume"
    line = f"mcore-grpo: run aborted{at}: {cause}; {then}"
    return f"{line}\n{traceback}" if traceback else line


def _repeating_fix(error: str) -> str:
    """What ends a start-up failure that a rerun repeats."""
    if error in ("ImportError", "ModuleNotFoundError"):
        return (
            "the installed upstream tree lacks what the worker imports (a release stand-in, or "
            "an unpatched tree); install the exact pins: tools/apply_patches.sh with GitHub or "
            "a mirror of the pins reachable (PATCHTOOL_MIRROR_DIR), then uv sync "
            "(docs/environment.md)"
        )
    return "fix the cause above; a rerun repeats it"


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="mcore-grpo",
        description="GRPO on the patched Megatron-Core tree (Ray workers, one torch.distributed group).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    _add_setup_options(parser)
    _add_mode_options(parser)
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


def _add_setup_options(parser: argparse.ArgumentParser) -> None:
    """What the run is: its config, its workers, where it writes and resumes from."""
    parser.add_argument(
        "--preset",
        default=DEFAULT_PRESET,
        help=f"named config preset ({', '.join(preset_names())}); default {DEFAULT_PRESET}",
    )
    parser.add_argument("--config", type=Path, help="YAML config file applied over the preset")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="policy workers (Ray actors, one per GPU); default 1 (--dry-run: the preset's "
        "cluster for a GPU preset)",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        help="where metrics.jsonl, the plot and checkpoints go (default runs/<preset>)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue from the latest checkpoint in --output-dir"
    )


def _add_mode_options(parser: argparse.ArgumentParser) -> None:
    """How it runs and what it shows: the process, the driver, the export, a dry run."""
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the single worker in this process instead of a Ray actor (debugging)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    parser.add_argument(
        "--export-hf",
        type=Path,
        metavar="DIR",
        help="after the last step, write the policy to DIR as a Hugging Face checkpoint "
        "(tokenizer included; HF models only). With --resume and no steps left: export the "
        "checkpointed model",
    )
    parser.add_argument(
        "--driver",
        choices=DRIVERS,
        default="mcore",
        help="the GRPO loop: mcore (this package's, default) or nemo-rl (NeMo-RL's grpo_train "
        "from 3rdparty/NeMo-RL driving the same worker; no fallback between the two)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check the layout and print each GPU's parameters and memory, then exit: no "
        "weights downloaded, nothing trained, works on a CPU machine for GPU presets",
    )
    parser.add_argument("--json", action="store_true", help="--dry-run's findings as JSON")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print every upstream log record and warning (default: held back in "
        "<output dir>/upstream-logs/, counted in one closing line)",
    )


def check_device(config: RunConfig, preset: str) -> None:
    """GPU presets refuse clearly on a machine without CUDA."""
    if config.policy.device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(
            f"preset/config '{preset}' needs CUDA GPUs (policy.device=cuda, "
            f"{config.cluster.num_nodes} node(s) x {config.cluster.gpus_per_node} GPUs, "
            f"model {config.policy.model_name}); this machine has none. Use the CPU preset "
            "(--preset cpu-tiny) here; see docs/grpo.md for what the GPU presets need."
        )


def _log_run(args: argparse.Namespace, config: RunConfig, output_dir: Path) -> None:
    """The run's one-line header, the same for both drivers."""
    log.info(
        "mcore-grpo: preset %s, %d worker(s), %d steps x %d samples -> %s",
        args.preset,
        args.workers,
        config.grpo.max_num_steps,
        config.samples_per_step,
        output_dir,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `mcore-grpo` console script; returns the exit status."""
    # Options and key=value overrides in any order (`--workers 2 a.b=1 --resume a.c=2`).
    args = build_parser().parse_intermixed_args(argv)
    # --json: standard output is the document alone; logs (ours and upstream's) go to stderr.
    log_stream = sys.stderr if args.json else sys.stdout
    with signals_restored(), console_logging(log_stream, args.verbose) as held:
        interrupt_on_signals()
        try:
            return _main(args, held)
        finally:
            line = closing_line(held)
            if line is not None:
                log.info(line)


def _main(args: argparse.Namespace, held: HeldBack | None) -> int:
    """The run after the command line is read: config, then the driver; the exit status."""
    try:
        config = load_config(args.preset, args.config, args.overrides)
        if args.workers is not None and args.workers < 1:
            raise ConfigError(f"--workers {args.workers}: need at least 1")
        if args.dry_run:
            return run_dry(args, config)
        check_device(config, args.preset)
        args.workers = args.workers or 1
        check_layout(config, args.workers)
    except ConfigError as err:
        print(f"mcore-grpo: config error: {err}", file=sys.stderr)
        return 2
    _note_unused_settings(config)
    output_dir = args.output_dir or Path("runs") / args.preset
    hold_back_into(held, output_dir)
    try:
        config, task = _model_and_task(args, config, output_dir)
    except ConfigError as err:
        print(f"mcore-grpo: config error: {err}", file=sys.stderr)
        return 2
    if args.driver == "nemo-rl":
        return run_nemo_rl_driver(args, config, output_dir)
    return run_mcore_driver(args, config, task, output_dir)


def _note_unused_settings(config: RunConfig) -> None:
    """A note per setting that is read but has no effect yet (`unused_settings`)."""
    for setting in unused_settings(config):
        log.warning(
            "mcore-grpo: note: %s is read but not used: sampling does not go through "
            "megatron-core's dynamic inference engine yet (docs/grpo.md)",
            setting,
        )


def _model_and_task(
    args: argparse.Namespace, config: RunConfig, output_dir: Path
) -> tuple[RunConfig, Task]:
    """The config with its model resolved (`resolve_model`) and the task built from it;
    `ConfigError` where they do not fit, also for --export-hf of a model without HF format."""
    if args.export_hf is not None and not is_hf_model(config.policy.model_name):
        raise ConfigError(
            f"--export-hf needs a Hugging Face model (policy.model_name: a checkpoint, a Hub "
            f"id or tiny-hf-qwen2); {config.policy.model_name} has no Hugging Face format"
        )
    config = resolve_model(config, output_dir)
    return config, make_task(config)


def run_mcore_driver(
    args: argparse.Namespace, config: RunConfig, task: Task, output_dir: Path
) -> int:
    """``--driver mcore`` (default): this package's `GRPOLoop` over the runner's workers."""
    from mcore_grpo.grpo.driver.loop import GRPOLoop

    log.info("mcore-grpo: driver mcore (mcore_grpo.grpo.driver.loop.GRPOLoop)")
    start = time.perf_counter()
    _log_run(args, config, output_dir)
    tokens = TaskTokens.of(task)
    # The worker logs the backend that actually runs (it falls back to recompute where the
    # KV cache cannot run, e.g. sequence parallelism); this is the one the config asks for.
    log.info("mcore-grpo: generation backend %s", sampling_params(config, tokens).backend)
    runner = None
    loop = None
    try:
        fail_rank, fail_step = injected_failure()
        runner = make_runner(
            config,
            tokens,
            args.workers,
            in_process=args.in_process,
            fail_at_rank=fail_rank,
            fail_at_step=fail_step,
        )
        interrupt_on_signals()  # again: ray.init installs a handler that aborts on SIGTERM
        log.info("mcore-grpo: %s", placement.record(runner.places, output_dir))
        loop = GRPOLoop(config, task, runner, output_dir, export_hf=args.export_hf)
        result = loop.run(resume=args.resume, progress=not args.no_progress)
    except (ConfigError, CheckpointError, ValueError, PlacementError) as err:
        print(f"mcore-grpo: {err}", file=sys.stderr)
        return 2
    except WorkerFailed as err:
        step = loop.current_step if loop is not None else None
        print(aborted_message(err, output_dir, step, sys.argv[1:]), file=sys.stderr)
        return 1
    except KeyboardInterrupt as err:
        print(
            f"mcore-grpo: interrupted ({err or 'SIGINT'}); continue from the last complete "
            f"checkpoint with --output-dir {output_dir} --resume",
            file=sys.stderr,
        )
        return INTERRUPTED
    finally:
        if runner is not None:
            runner.shutdown()
    _log_done(result, config, start)
    return 0


def _log_done(result: RunResult, config: RunConfig, start: float) -> None:
    """The mcore driver's closing lines: time, reward, held-out accuracy, where it all went."""
    summary = summarize(result.records)
    log.info(
        "done in %.1f s: reward %.3f (first 5 steps) -> %.3f (last 5), mean step %.2f s",
        time.perf_counter() - start,
        summary.get("reward_first", float("nan")),
        summary.get("reward_last", float("nan")),
        summary.get("step_time_mean_s", float("nan")),
    )
    if "held_out_after" in summary:
        log.info(
            "held-out accuracy (greedy, %s): %s before -> %.3f after%s",
            config.task.name,
            f"{summary['held_out_before']:.3f}" if "held_out_before" in summary else "not measured",
            summary["held_out_after"],
            f"; the exported checkpoint under transformers: {summary['held_out_after_transformers']:.3f}"
            if "held_out_after_transformers" in summary
            else "",
        )
    log.info(
        "metrics: %s  plot: %s  checkpoint: %s",
        result.metrics_path,
        result.plot_path,
        result.checkpoint_path,
    )
    if result.hf_path is not None:
        log.info("Hugging Face checkpoint: %s", result.hf_path)


def run_dry(args: argparse.Namespace, config: RunConfig) -> int:
    """`--dry-run`: the layout checked and each GPU's share printed; raises `ConfigError`."""
    from mcore_grpo.grpo.driver import dry_run
    from mcore_grpo.worker.bridge_source import BridgeUnavailable

    try:
        # Upstream imports print to stdout: held back (with --verbose, on stderr: never in
        # --json's document).
        with contextlib.redirect_stdout(sys.stderr), upstream_output():
            found = dry_run.dry_run(config, args.preset, args.workers)
    except BridgeUnavailable as err:
        raise ConfigError(str(err)) from err
    print(dry_run.as_json(found) if args.json else dry_run.render(found))
    return 0


def run_nemo_rl_driver(args: argparse.Namespace, config: RunConfig, output_dir: Path) -> int:
    """``--driver nemo-rl``: NeMo-RL's grpo_train; exit 2 (one line) where NeMo-RL is absent."""
    from mcore_grpo.grpo.nemo_rl.source import NemoRLUnavailable
    from mcore_grpo.nemo_rl_driver import driver

    if args.in_process:
        print("mcore-grpo: --in-process is not supported with --driver nemo-rl", file=sys.stderr)
        return 2
    _log_run(args, config, output_dir)
    try:
        result = driver.run(
            config, args.workers, output_dir, export_hf=args.export_hf, resume=args.resume
        )
    except NemoRLUnavailable as err:
        print(f"mcore-grpo: --driver nemo-rl: {err}", file=sys.stderr)
        return 2
    except (ConfigError, ValueError, PlacementError) as err:
        print(f"mcore-grpo: {err}", file=sys.stderr)
        return 2
    except WorkerFailed as err:
        found = driver.latest_checkpoint(output_dir)
        print(aborted_message(err, output_dir, None, sys.argv[1:], found), file=sys.stderr)
        return 1
    rewards = result.rewards
    log.info(
        "done in %.1f s (driver nemo-rl): %d steps, reward %.3f (first 5 steps) -> %.3f "
        "(last 5), from NeMo-RL's logged train/reward",
        result.wall_s,
        len(rewards),
        sum(rewards[:5]) / max(1, len(rewards[:5])),
        sum(rewards[-5:]) / max(1, len(rewards[-5:])),
    )
    log.info("NeMo-RL logs: %s", result.log_dir)
    if result.hf_path is not None:
        log.info("Hugging Face checkpoint: %s", result.hf_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
