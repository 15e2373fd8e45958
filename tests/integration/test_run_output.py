"""A run prints its own lines; upstream log records and warnings are held back in a file."""

from __future__ import annotations

import io
import logging
import re
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
)

from tests.support.cli_run import run_cli_status

# What only upstream code says on a CPU run; none of it may reach the console by default.
UPSTREAM_NOISE = re.compile(
    r"Traceback|Transformer Engine|TransformerEngine|[Aa]pex|Warning|INFO:|WARNING:|\(PolicyRank"
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
