"""nemo_automodel 0.4.0 under triton 3.9: its one module that fails at import, on its own fallback.

NeMo-RL imports nemo_automodel where it is installed (`nemo_rl/models/policy/utils.py` in a
``try: ... except ImportError``, the DTensor v2 worker unconditionally); this project installs it
(the ``nemo-rl-automodel`` group, without its dependencies). torch 2.15 requires
``triton~=3.9.0``, and under triton 3.9 ``nemo_automodel.components._peft.lora_kernel`` raises
at import: ``@triton.autotune(key=["S", "M", "K"])`` on ``lora_db_kernel`` names ``S``, which is
not a parameter of that kernel (an automodel bug triton 3.9 started checking): ``ValueError:
key contains names that are not kernel arguments: S``. A ValueError is not the ImportError
NeMo-RL's guard catches, so every ``import nemo_rl.algorithms.grpo`` fails.

The module has its own path for machines without triton (``HAVE_TRITON = False``: ``triton.jit``
and ``autotune`` become no-op decorators). `import_lora_kernel_without_triton` imports that one
module with ``triton`` unimportable, so its real code takes that path; the LoRA triton kernels
only run for LoRA with ``use_triton``, which nothing here enables.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

LORA_KERNEL_MODULE = "nemo_automodel.components._peft.lora_kernel"


def automodel_installed() -> bool:
    """True when the ``nemo-rl-automodel`` group is installed."""
    return importlib.util.find_spec("nemo_automodel") is not None


def import_lora_kernel_without_triton() -> None:
    """Import the LoRA kernel module on its no-triton path; once per process."""
    if LORA_KERNEL_MODULE in sys.modules:
        return
    # Its imports and parent packages (empty __init__s) first, with triton visible.
    for name in ("nemo_automodel.shared.import_utils", "nemo_automodel.components._peft"):
        importlib.import_module(name)
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if name == "triton"}
    sys.modules["triton"] = None  # type: ignore[assignment]  # `import triton` -> ImportError
    before = set(sys.modules)
    try:
        module = importlib.import_module(LORA_KERNEL_MODULE)
    finally:
        del sys.modules["triton"]
        sys.modules.update(saved)
    new = sorted(set(sys.modules) - before - {LORA_KERNEL_MODULE})
    if new:  # anything else imported while triton was hidden would keep that view
        raise RuntimeError(
            f"modules imported with triton hidden besides {LORA_KERNEL_MODULE}: {new}"
        )
    if getattr(module, "HAVE_TRITON", True):
        raise RuntimeError(f"{LORA_KERNEL_MODULE} did not take its no-triton path")


def prepare_automodel() -> None:
    """Where nemo_automodel is installed, import its LoRA kernel module the safe way first."""
    if automodel_installed():
        import_lora_kernel_without_triton()
