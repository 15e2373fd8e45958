"""`policy.model_name` for a real model: what is refused at once, in one line naming the fix.

The conversion of the SmolLM2 wheel's GGUF itself is exercised end to end by
`test_real_model.py` (it takes ~1 min on 2 cores); these are the instant refusals.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from mcore_grpo.config.schema import ConfigError
from mcore_grpo.grpo.policy_model import pretrained

from tests.support.cli_run import run_cli_status


def test_a_path_that_does_not_exist_is_refused_at_once() -> None:
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"policy.model_name=/nonexistent/dir: no such directory"):
        pretrained.resolve_pretrained("/nonexistent/dir")
    assert time.perf_counter() - start < 1.0


def test_a_hub_id_not_in_the_cache_on_an_offline_machine_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    with pytest.raises(
        ConfigError, match=r"someorg/some-model: not in the local Hugging Face cache .* unreachable"
    ):
        pretrained.resolve_pretrained("someorg/some-model")


def test_a_missing_gguf_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"model.gguf: no such GGUF file"):
        pretrained.resolve_pretrained(str(tmp_path / "model.gguf"))


def test_an_existing_directory_is_used_as_it_is(tmp_path: Path) -> None:
    assert pretrained.resolve_pretrained(str(tmp_path)) == str(tmp_path.resolve())


def test_the_smollm2_wheel_is_found_without_importing_its_package() -> None:
    gguf = pretrained.smollm2_gguf()
    assert gguf.name == pretrained.SMOLLM2_GGUF and gguf.stat().st_size > 90_000_000


def test_the_cli_refuses_a_missing_model_in_one_line(tmp_path: Path) -> None:
    code, out = run_cli_status(
        tmp_path, "--preset", "cpu-smollm2-arith", "policy.model_name=/nonexistent/dir"
    )
    assert code == 2
    errors = [line for line in out.splitlines() if line.startswith("mcore-grpo:")]
    assert errors == [
        "mcore-grpo: config error: policy.model_name=/nonexistent/dir: no such directory; give a "
        "Hugging Face checkpoint directory (written by save_pretrained), a .gguf file, a Hub id, "
        "or 'smollm2-135m-instruct'"
    ]
    assert "Traceback" not in out


def test_a_math_task_on_the_tiny_gpt_is_refused(tmp_path: Path) -> None:
    code, out = run_cli_status(
        tmp_path, "--preset", "cpu-smollm2-arith", "policy.model_name=tiny-gpt"
    )
    assert code == 2
    assert "task.name=arithmetic needs a pretrained Hugging Face model" in out
