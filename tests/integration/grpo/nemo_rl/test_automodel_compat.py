"""nemo_automodel's LoRA kernel module under triton 3.9: fails as-is, imports on its fallback.

Each case runs in a fresh interpreter: the import under test must be the process's first.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from mcore_grpo.grpo.nemo_rl.automodel_compat import LORA_KERNEL_MODULE, automodel_installed

pytestmark = pytest.mark.skipif(
    not automodel_installed(),
    reason="nemo_automodel is not installed (the default `nemo-rl-automodel` group of uv sync)",
)


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)


def test_plain_import_fails_under_this_triton() -> None:
    """Why the workaround exists: if this starts passing, automodel or triton fixed it."""
    run = _python(f"import {LORA_KERNEL_MODULE}")
    assert run.returncode != 0
    assert "not kernel arguments: S" in run.stderr


def test_prepared_import_takes_the_no_triton_path_and_automodel_then_imports() -> None:
    run = _python(
        "import sys\n"
        "from mcore_grpo.grpo.nemo_rl.automodel_compat import prepare_automodel\n"
        "prepare_automodel()\n"
        "import triton\n"
        f"assert sys.modules[{LORA_KERNEL_MODULE!r}].HAVE_TRITON is False\n"
        "import nemo_automodel._transformers.auto_model\n"
        "print('ok')\n"
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().endswith("ok")
