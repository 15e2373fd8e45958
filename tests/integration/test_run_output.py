"""A run prints its own lines; upstream log records and warnings are held back in a file."""

from __future__ import annotations

import io
import logging
import re
import sys
import warnings
from pathlib import Path

import pytest
from mcore_grpo.run_output import (
    DIR_NAME,
    LOG_DIR_ENV,
    closing_line,
    console_logging,
    hold_back_into,
    ray_runtime_env,
    upstream_output,
)

from tests.support.cli_run import run_cli_status

# What only upstream code says on a CPU run; none of it may reach the console by default.
UPSTREAM_NOISE = re.compile(
    r"Traceback|Transformer Engine|TransformerEngine|[Aa]pex|Warning|INFO:|WARNING:|\(PolicyRank"
    r"|number of parameters|Success: All tensors|Loading from|Loading weights|Writing model shards"
)
# Every line a successful run prints (--no-progress): the `mcore_grpo` loggers' own.
OUR_LINE = re.compile(
    r"(mcore-grpo: |mcore_grpo\.|generation backend: |step +\d+/\d+ \| |done in |metrics: "
    r"|Hugging Face checkpoint: |held-out accuracy |resumed from step )"
)


def test_only_our_records_and_errors_reach_the_console(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(LOG_DIR_ENV, raising=False)
    console = io.StringIO()
    root_handlers = list(logging.getLogger().handlers)
    with console_logging(console, verbose=False) as held:
        logging.getLogger("megatron.core.utils").warning("Transformer Engine is not installed")
        logging.getLogger("mcore_grpo").info("mcore-grpo: ours")
        hold_back_into(held, tmp_path)  # the earlier record is written too
        warnings.warn("Apex is not installed", UserWarning, stacklevel=1)
        logging.getLogger("megatron.bridge").error("a real upstream error")
        logging.getLogger("mcore_grpo.worker.generation").info("generation backend: x")
        assert ray_runtime_env()["env_vars"] == {LOG_DIR_ENV: str(tmp_path / DIR_NAME)}
        line = closing_line(held)
    assert console.getvalue().splitlines() == [
        "mcore-grpo: ours",
        "a real upstream error",
        "generation backend: x",
    ]
    held_text = (tmp_path / DIR_NAME / "driver.log").read_text()
    assert "WARNING megatron.core.utils: Transformer Engine is not installed" in held_text
    assert "WARNING py.warnings: " in held_text and "Apex is not installed" in held_text
    assert "real upstream error" not in held_text
    assert line is not None and "2 upstream log records and warnings held back in" in line
    assert logging.getLogger().handlers == root_handlers  # restored for the next caller


def test_verbose_keeps_every_record_on_the_console(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(LOG_DIR_ENV, raising=False)
    console = io.StringIO()
    with console_logging(console, verbose=True) as held:
        hold_back_into(held, tmp_path)
        logging.getLogger("megatron.core.utils").warning("Transformer Engine is not installed")
        assert ray_runtime_env() == {} and closing_line(held) is None
    assert "Transformer Engine is not installed" in console.getvalue()
    assert not (tmp_path / DIR_NAME).exists()


@pytest.mark.slow
@pytest.mark.cpu_only(reason="runs the CPU presets")
@pytest.mark.parametrize("preset", ["cpu-tiny", "cpu-hf-tiny"])
def test_a_successful_run_prints_only_its_own_lines(tmp_path: Path, preset: str) -> None:
    """The user's runs of issue 36: cpu-tiny printed 16 upstream notices, cpu-hf-tiny two
    tracebacks of Bridge's optional Transformer Engine import; both succeeded."""
    out = tmp_path / "run"
    args = ["--preset", preset, "--output-dir", str(out), "--no-progress"]
    code, log = run_cli_status(tmp_path, *args, "grpo.max_num_steps=1", timeout=900)
    assert code == 0, log[-6000:]
    (closing,) = [line for line in log.splitlines() if line.startswith("mcore-grpo: ran without")]
    noise = [line for line in log.splitlines() if UPSTREAM_NOISE.search(line) and line != closing]
    assert noise == [], "\n".join(noise[:20])
    assert "Token authentication" not in log  # Ray's own logger, routed too
    assert closing.startswith("mcore-grpo: ran without Transformer Engine, Apex, CUDA; ")
    count = int(re.search(r"; (\d+) upstream log records", closing).group(1))  # type: ignore[union-attr]
    assert count > 0
    files = sorted(p.name for p in (out / DIR_NAME).iterdir())
    assert "driver.log" in files and any(name.startswith("worker-") for name in files)
    held = "".join(p.read_text() for p in (out / DIR_NAME).iterdir())
    assert "Transformer Engine" in held or "TransformerEngine" in held


@pytest.mark.cpu_only(reason="runs a CPU preset")
def test_a_successful_in_process_run_prints_only_its_own_lines(tmp_path: Path) -> None:
    """Issue 46: with the worker in the driver (--in-process), cpu-hf-tiny printed Bridge's
    "Import of FP8GlobalStateManager ... Traceback" (a logger with a console handler of its
    own), megatron's " > number of parameters" and Bridge's "Success: All tensors ..." (plain
    prints), Bridge's "Loading from ..." and transformers' "Writing model shards" (progress
    bars), though the run succeeded. Each is in the held-back file instead, once."""
    out = tmp_path / "run"
    args = ["--preset", "cpu-hf-tiny", "--in-process", "--output-dir", str(out), "--no-progress"]
    code, log = run_cli_status(tmp_path, *args, "grpo.max_num_steps=1", timeout=900)
    assert code == 0, log[-6000:]
    lines = [line for line in log.splitlines() if line.strip()]
    assert [line for line in lines if not OUR_LINE.match(line)] == [], log[-6000:]
    assert lines[-1].startswith("mcore-grpo: ran without ")
    assert [p.name for p in (out / DIR_NAME).iterdir()] == ["driver.log"]
    held = (out / DIR_NAME / "driver.log").read_text()
    for upstream in (" > number of parameters", "Success: All tensors", "Writing model shards"):
        assert upstream in held, upstream
    fp8 = "Import of FP8GlobalStateManager from megatron.core.extensions.transformer_engine failed"
    assert held.count(f"INFO megatron.bridge.utils.import_utils: {fp8}") == 1


def test_upstream_output_holds_back_prints_and_console_handlers_not_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `--in-process` runs in the driver: its prints and a console handler its import
    adds (Bridge's `import_utils`) go to the held-back file; ours and errors do not."""
    monkeypatch.delenv(LOG_DIR_ENV, raising=False)
    console = io.StringIO()
    upstream = logging.getLogger("megatron.bridge.test_import_utils")
    monkeypatch.setattr(upstream, "handlers", [])
    with console_logging(console, verbose=False) as held:
        hold_back_into(held, tmp_path)
        with pytest.raises(RuntimeError, match="a real failure"), upstream_output():
            print(" > number of parameters on rank 0: 107072")
            upstream.addHandler(logging.StreamHandler())  # at import, on sys.stderr
            upstream.info("Import of FP8GlobalStateManager failed with: Traceback")
            logging.getLogger("mcore_grpo.worker").info("mcore-grpo: ours")
            raise RuntimeError("a real failure")
        assert upstream.handlers == []  # its records take the root's route from now on
        upstream.error("an upstream error")
        line = closing_line(held)
    assert console.getvalue().splitlines() == ["mcore-grpo: ours", "an upstream error"]
    held_text = (tmp_path / DIR_NAME / "driver.log").read_text()
    assert " > number of parameters on rank 0: 107072\n" in held_text
    assert "INFO megatron.bridge.test_import_utils: Import of FP8" in held_text
    assert line is not None and "1 upstream log records" in line


def test_upstream_output_before_the_output_directory_is_held_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upstream code may print before the run has made its output directory (the in-process
    worker of cpu-tiny, importing NeMo-RL) or in a run that makes none (--dry-run): held with
    the records, written once the directory exists, and no directory made for it."""
    monkeypatch.delenv(LOG_DIR_ENV, raising=False)
    out = tmp_path / "run"
    console = io.StringIO()
    with console_logging(console, verbose=False) as held:
        hold_back_into(held, out)
        with upstream_output():
            print("Import of FP8GlobalStateManager failed with: Traceback", file=sys.stderr)
        assert not out.exists()
        out.mkdir()  # the run goes on and makes it
        assert closing_line(held) is not None
    assert console.getvalue() == ""
    assert "FP8GlobalStateManager" in (out / DIR_NAME / "driver.log").read_text()


def test_upstream_output_outside_a_run_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with upstream_output():
        print("shown")
    assert capsys.readouterr().out == "shown\n"


def test_libraries_with_their_own_handler_are_held_back_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's and transformers' loggers print through their own handlers (propagate off):
    the SmolLM2 preset printed torch's "W1125 ... _pytree.py" lines and "[transformers]
    Ignoring clean_up_tokenization_spaces ..." despite the routing of the root."""
    from transformers.utils import logging as hf_logging

    monkeypatch.delenv(LOG_DIR_ENV, raising=False)
    hf_logging.get_logger()
    # Each library's own handler, as torch and transformers install it, set here rather than
    # taken as found: earlier tests in the same process may have reconfigured either logger.
    library_console = io.StringIO()
    for name in ("torch", "transformers"):
        library_logger = logging.getLogger(name)
        monkeypatch.setattr(library_logger, "handlers", [logging.StreamHandler(library_console)])
        monkeypatch.setattr(library_logger, "propagate", False)
    before = {
        name: (list(logging.getLogger(name).handlers), logging.getLogger(name).propagate)
        for name in ("torch", "transformers")
    }
    console = io.StringIO()
    with console_logging(console, verbose=False) as held:
        hold_back_into(held, tmp_path)
        logging.getLogger("torch.utils._pytree").warning("an Enum subclass, natively supported")
        hf_logging.get_logger("transformers.tokenization_utils_tokenizers").warning(
            "Ignoring clean_up_tokenization_spaces=True for BPE tokenizer"
        )
        line = closing_line(held)
    assert console.getvalue() == "" and library_console.getvalue() == ""
    assert line is not None and "2 upstream log records" in line
    held_text = (tmp_path / DIR_NAME / "driver.log").read_text()
    assert "natively supported" in held_text and "clean_up_tokenization_spaces" in held_text
    after = {
        name: (list(logging.getLogger(name).handlers), logging.getLogger(name).propagate)
        for name in ("torch", "transformers")
    }
    assert after == before  # restored for whoever runs next in this process


def test_a_run_that_never_made_its_output_directory_leaves_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(LOG_DIR_ENV, raising=False)
    out = tmp_path / "refused"
    with console_logging(io.StringIO(), verbose=False) as held:
        hold_back_into(held, out)
        logging.getLogger("megatron.core").warning("held in memory only")
        assert closing_line(held) is None
    assert not out.exists()
