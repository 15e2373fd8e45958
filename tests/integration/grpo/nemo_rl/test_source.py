"""Where NeMo-RL is not installed (no checkout when the environment was synced): one clear
error for --driver nemo-rl, no fallback, and the default driver never imports NeMo-RL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mcore_grpo.cli import build_parser, main
from mcore_grpo.grpo.nemo_rl import source


def _not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the empty `nemo-rl` distribution (`0+absent`) leaves it: no `nemo_rl` to import."""
    real = source.find_spec
    monkeypatch.setattr(source, "find_spec", lambda name: None if name == "nemo_rl" else real(name))


def test_absent_nemo_rl_raises_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    _not_installed(monkeypatch)
    assert not source.is_available()
    with pytest.raises(
        source.NemoRLUnavailable, match=r"tools/apply_patches\.sh.*, then `uv sync`"
    ):
        source.require_nemo_rl()


def test_cli_asks_for_nemo_rl_where_it_is_absent_and_fails_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _not_installed(monkeypatch)
    code = main(["--driver", "nemo-rl", "--workers", "2", "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith(
        "mcore-grpo: --driver nemo-rl: NeMo-RL is not installed in this environment"
    )
    assert not (tmp_path / "run").exists()  # nothing ran: no fallback to the mcore driver


def test_the_default_driver_is_ours() -> None:
    assert build_parser().parse_args([]).driver == "mcore"


def test_the_cli_imports_no_nemo_rl_module() -> None:
    code = "import sys, mcore_grpo.cli; print(sorted(m for m in sys.modules if m.startswith('nemo_rl')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
