"""What a run prints: this project's lines on the console, upstream notices in a log file.

Why: on a CPU machine megatron-core, Megatron-Bridge, NeMo-RL and their dependencies log dozens
of notices that only say Transformer Engine, Apex or CUDA is absent, some with the full
traceback of an optional import, and a user reads "Traceback" as failure. By default the
console shows the ``mcore_grpo`` loggers and any record at ERROR or above, from anyone;
every other log record and Python warning, in the driver and in every Ray worker, is written
to ``<output dir>/upstream-logs/`` (one file per process) and counted in one closing line.
``--verbose`` keeps today's behaviour: every record on the console.

The driver routes its records with `console_logging` (records are kept in memory until the run
has made its output directory, then written there); Ray workers run `setup_worker` first thing,
through ``runtime_env.worker_process_setup_hook`` (`ray_runtime_env`), with the directory in
`LOG_DIR_ENV`. A worker's plain prints go to its file too: a worker's failure reaches the
driver as the exception Ray returns, never through its console. Upstream code the driver runs
itself (the ``--in-process`` worker, the export graded by `transformers`) runs inside
`upstream_output`: its prints and progress bars go to the driver's file the same way.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

OURS = "mcore_grpo"
LOG_DIR_ENV = "MCORE_GRPO_UPSTREAM_LOG_DIR"
DIR_NAME = "upstream-logs"
RECORD_FORMAT = "%(levelname)s %(name)s: %(message)s"
_RECORD_LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+: ")


def is_ours(record: logging.LogRecord) -> bool:
    """Shown on the console: our loggers' records, and anyone's error."""
    name = record.name
    return name == OURS or name.startswith(OURS + ".") or record.levelno >= logging.ERROR


class HeldBack(logging.Handler):
    """Every record the console does not show: in memory until the run's output directory
    exists, then in its file (`write_to`). It never creates the output directory itself: a run
    refused before it starts leaves nothing behind."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.addFilter(lambda record: not is_ours(record))
        self.setFormatter(logging.Formatter(RECORD_FORMAT))
        self.pending: list[str] = []
        self.stream: TextIO | None = None
        self.path: Path | None = None
        self.output_dir: Path | None = None

    def write_to(self, path: Path, *, now: bool = False) -> None:
        """Hold records in `path` (``<output dir>/upstream-logs/NAME.log``) once the output
        directory exists; `now`: create it at once (a Ray worker of a running run)."""
        self.path = path
        if now:
            self._open(path)

    def _open(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.stream = path.open("a", encoding="utf-8", buffering=1)
        self.stream.writelines(line + "\n" for line in self.pending)
        self.pending = []

    def hold_text(self, spool: TextIO) -> None:
        """Plain output spooled while there was no file to write it to: held with the records."""
        spool.seek(0)
        self.pending.extend(spool.read().splitlines())

    def flush_pending(self) -> bool:
        """Write what is pending if the output directory exists; whether the file is open."""
        if self.stream is None and self.path is not None and self.path.parent.parent.is_dir():
            self._open(self.path)
        return self.stream is not None

    def emit(self, record: logging.LogRecord) -> None:
        line = self.format(record)
        if self.flush_pending():
            assert self.stream is not None
            self.stream.write(line + "\n")
        else:
            self.pending.append(line)

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        super().close()


def _route(console: TextIO, held: HeldBack | None) -> None:
    """Root's handlers replaced (not closed: a caller may restore them): `console` shows what
    `held` does not take (everything, without `held`)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    shown = logging.StreamHandler(console)
    shown.setFormatter(logging.Formatter("%(message)s"))
    root.addHandler(shown)
    root.setLevel(logging.INFO)
    if held is not None:
        shown.addFilter(is_ours)
        root.addHandler(held)
        logging.captureWarnings(True)  # warnings.warn -> the "py.warnings" logger -> held back


# Libraries whose root logger prints through a handler of its own (propagate off), so that
# routing the root alone misses them: torch's internal logging (e.g. "W1125 ... _pytree.py:646]
# <enum 'KernelPreference'> is an Enum subclass ...") and transformers' ("[transformers]
# Ignoring clean_up_tokenization_spaces=True for BPE tokenizer ..." on SmolLM2's tokenizer).
OWN_HANDLER_LIBRARIES = ("torch", "transformers")


def _library_root_loggers() -> list[logging.Logger]:
    """The loggers of `OWN_HANDLER_LIBRARIES`, configured now (each adds its handler on first
    use, which would undo a routing made before)."""
    import torch  # noqa: F401  (torch._logging installs its handler at import)
    from transformers.utils import logging as hf_logging

    hf_logging.get_logger()
    return [logging.getLogger(name) for name in OWN_HANDLER_LIBRARIES]


def _to_root(loggers: list[logging.Logger]) -> list[tuple[logging.Logger, list[Any], bool]]:
    """Each logger's records take the root's route; what to restore afterwards."""
    saved = []
    for logger in loggers:
        saved.append((logger, list(logger.handlers), logger.propagate))
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.propagate = True
    return saved


@contextlib.contextmanager
def console_logging(console: TextIO, verbose: bool) -> Iterator[HeldBack | None]:
    """The run's logging, undone on exit (tests call the CLI in-process): `verbose`, every
    record on `console` (yields None); else only ours, the rest held back (yields the handler
    to `open` once the output directory is known)."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    held = None if verbose else HeldBack()
    with warnings.catch_warnings():
        _route(console, held)
        libraries = [] if held is None else _to_root(_library_root_loggers())
        try:
            yield held
        finally:
            os.environ.pop(LOG_DIR_ENV, None)  # Ray jobs started after this run are not ours
            for logger, handlers, propagate in libraries:
                for handler in handlers:
                    logger.addHandler(handler)
                logger.propagate = propagate
            logging.captureWarnings(False)
            for handler in list(root.handlers):
                root.removeHandler(handler)
            for handler in saved[0]:
                root.addHandler(handler)
            root.setLevel(saved[1])
            if held is not None:
                held.close()


def hold_back_into(held: HeldBack | None, output_dir: Path) -> None:
    """Write the driver's held-back records under `output_dir` from now on, and tell Ray
    workers started later (`ray_runtime_env`) to do the same."""
    if held is None:
        os.environ.pop(LOG_DIR_ENV, None)
        return
    directory = (output_dir / DIR_NAME).resolve()
    held.write_to(directory / "driver.log")
    held.output_dir = output_dir
    os.environ[LOG_DIR_ENV] = str(directory)


def ray_runtime_env() -> dict[str, Any]:
    """`ray.init(runtime_env=...)`: every worker of the job runs `setup_worker` first."""
    directory = os.environ.get(LOG_DIR_ENV)
    if not directory:
        return {}
    return {
        "env_vars": {LOG_DIR_ENV: directory},
        "worker_process_setup_hook": f"{__name__}.setup_worker",
    }


def route_ray_logger() -> None:
    """Ray's ``ray`` logger prints through a handler of its own (propagate off), e.g. "Token
    authentication is enabled ..." at every start; while records are held back, its records
    take the root's route like everyone else's (errors still print). Call after importing ray."""
    if not os.environ.get(LOG_DIR_ENV):
        return  # --verbose (or no CLI run): Ray as it is
    _to_root([logging.getLogger("ray")])


def setup_worker() -> None:
    """In a Ray worker: our records to its console (Ray forwards them), the rest and plain
    prints to ``<dir>/worker-<pid>.log``."""
    directory = os.environ.get(LOG_DIR_ENV)
    if not directory:
        return
    console = sys.stderr
    held = HeldBack()
    held.write_to(Path(directory) / f"worker-{os.getpid()}.log", now=True)
    _route(console, held)
    assert held.stream is not None
    sys.stdout = sys.stderr = held.stream


def _held_back() -> HeldBack | None:
    """This process's `HeldBack` handler on the root logger, if a run holds records back."""
    return next((h for h in logging.getLogger().handlers if isinstance(h, HeldBack)), None)


@contextlib.contextmanager
def upstream_output() -> Iterator[None]:
    """Upstream code run in this process (the ``--in-process`` worker, `transformers` grading
    the export) writes its plain output where a Ray worker's goes: while records are held back,
    `sys.stdout` and `sys.stderr` are the held-back file. That takes its prints (megatron's
    " > number of parameters ...", Bridge's "Success: All tensors ..."), progress bars
    (Bridge's "Loading from ...", transformers' "Loading weights", "Writing model shards") and
    the console handlers a module gives its logger at import (`_release_handlers_on`). Our
    records still reach the console (its handler holds the console stream itself), and so do
    errors: they are raised, and the CLI reports them. Before the run has made its output
    directory (or in a run that makes none: --dry-run) the output is held in memory with the
    records, so a run refused before it starts still leaves nothing behind. Nothing changes
    with --verbose or outside a CLI run."""
    held = _held_back()
    if held is None:
        yield
        return
    with contextlib.ExitStack() as stack:
        stream = held.stream if held.flush_pending() else None
        if stream is None:  # no output directory (yet): held with the records, in memory
            stream = stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8"))
            stack.callback(held.hold_text, stream)
        stack.callback(_release_handlers_on, stream)
        stack.enter_context(contextlib.redirect_stdout(stream))
        stack.enter_context(contextlib.redirect_stderr(stream))
        yield


def _release_handlers_on(stream: TextIO) -> None:
    """Megatron-Bridge's `import_utils` gives its logger a `StreamHandler()` of its own at import
    (on `sys.stderr`, which inside `upstream_output` is the held-back file), so an optional
    import's failure, e.g. "Import of FP8GlobalStateManager ... failed with: Traceback ...",
    prints once there and once through the root. Such handlers are removed once the block ends:
    the logger's records take the root's route (held back; an error on the console), and none
    is left writing to the file after it closes."""
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if not isinstance(logger, logging.Logger):
            continue  # a placeholder for a logger's children
        for handler in list(logger.handlers):
            if isinstance(handler, logging.StreamHandler) and handler.stream is stream:
                logger.removeHandler(handler)
                logger.propagate = True


def held_back_count(output_dir: Path) -> int:
    """How many log records and warnings the run's processes held back."""
    count = 0
    for path in sorted((output_dir / DIR_NAME).glob("*.log")):
        with path.open(encoding="utf-8", errors="replace") as lines:
            count += sum(1 for line in lines if _RECORD_LINE.match(line))
    return count


def cpu_run_without() -> list[str]:
    """What a run on this machine goes without, as the held-back notices say it."""
    import torch

    missing = [
        name
        for name, module in (("Transformer Engine", "transformer_engine"), ("Apex", "apex"))
        if importlib.util.find_spec(module) is None
    ]
    return missing + ([] if torch.cuda.is_available() else ["CUDA"])


def closing_line(held: HeldBack | None) -> str | None:
    """The one line that stands for everything held back; None with --verbose, or when the
    run ended before it made its output directory."""
    if held is None or held.output_dir is None or not held.flush_pending():
        return None  # --verbose, or a run that never made its output directory
    output_dir = held.output_dir
    without = cpu_run_without()
    gone = f"ran without {', '.join(without)}; " if without else ""
    count = held_back_count(output_dir)
    return (
        f"mcore-grpo: {gone}{count} upstream log records and warnings held back in "
        f"{output_dir / DIR_NAME} (--verbose prints them)"
    )
