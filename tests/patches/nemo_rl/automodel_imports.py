"""Import NeMo-RL's DTensor v2 worker with the real nemo_automodel (the `nemo-rl-automodel` group).

The v2 worker's training loop runs nemo_automodel code (`scale_grads_and_clip_grad_norm`, the
train context, `to_local_if_dtensor`), so its tripwire needs the real package, not the stub
`heavy_import_stubs.py` gives. nemo-automodel 0.4.0 is installed without its dependencies
(pyproject.toml: `[[tool.uv.dependency-metadata]]`) and imports on this project's torch 2.15 /
transformers 5.8.1 with ONE exception, worked around here:

- `nemo_automodel.components._peft.lora_kernel` defines LoRA triton kernels at import time; with
  triton 3.9 (the version torch 2.15 requires: `triton~=3.9.0`, so pinning 3.8 is not possible)
  `@triton.autotune(key=["S", "M", "K"])` on `lora_db_kernel` raises `ValueError: key contains
  names that are not kernel arguments: S` (an automodel bug: `S` is not a parameter of that
  kernel; triton 3.9 started checking). The module has its own fallback for machines without
  triton (`HAVE_TRITON = False`: `triton.jit`/`autotune` become no-op decorators); it is imported
  with `triton` unimportable for that one module, so its real code runs on that path. The
  kernels only run for LoRA with `use_triton`, which no test here enables.

The worker module itself is imported under `heavy_import_stubs.stubbed_imports` with every stub
except nemo_automodel: nemo_automodel's modules are imported first, against the real
transformers, and the stubbed NeMo-RL imports then find them already loaded.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

from tests.patches.nemo_rl.heavy_import_stubs import STUBBED_PACKAGES, stubbed_imports

V2_WORKER_MODULE = "nemo_rl.models.policy.workers.dtensor_policy_worker_v2"
LORA_KERNEL_MODULE = "nemo_automodel.components._peft.lora_kernel"

# Every nemo_automodel module NeMo-RL's v2 worker imports at module level (directly or through
# nemo_rl/models/automodel/{checkpoint,config,data,setup,train}.py).
AUTOMODEL_MODULES: tuple[str, ...] = (
    "nemo_automodel",
    "nemo_automodel._transformers.auto_model",
    "nemo_automodel._transformers.auto_tokenizer",
    "nemo_automodel._transformers.registry",
    "nemo_automodel.components._peft.lora",
    "nemo_automodel.components.checkpoint._backports.filesystem",
    "nemo_automodel.components.checkpoint.checkpointing",
    "nemo_automodel.components.config.loader",
    "nemo_automodel.components.distributed.config",
    "nemo_automodel.components.distributed.cp_utils",
    "nemo_automodel.components.distributed.mesh_utils",
    "nemo_automodel.components.distributed.tensor_utils",
    "nemo_automodel.components.moe.config",
    "nemo_automodel.components.training.utils",
)

MISSING_REASON = (
    "nemo_automodel is not installed: the DTensor v2 worker imports it "
    "(`uv sync` installs it with the default `nemo-rl-automodel` group)"
)


def automodel_installed() -> bool:
    """True when the `nemo-rl-automodel` group is installed."""
    return importlib.util.find_spec("nemo_automodel") is not None


def _import_lora_kernel_without_triton() -> None:
    """Import the LoRA kernel module on its own no-triton path (see the module docstring)."""
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


def import_automodel() -> None:
    """Import every nemo_automodel module the v2 worker needs, against the real transformers."""
    if LORA_KERNEL_MODULE not in sys.modules:
        _import_lora_kernel_without_triton()
    for name in AUTOMODEL_MODULES:
        importlib.import_module(name)


def import_v2_worker() -> ModuleType:
    """NeMo-RL's real DTensor v2 worker module (NeMo-RL must be on sys.path)."""
    import_automodel()
    before = {name for name in sys.modules if name.startswith("nemo_automodel")}
    packages = [name for name in STUBBED_PACKAGES if name != "nemo_automodel"]
    with stubbed_imports(packages):
        module = importlib.import_module(V2_WORKER_MODULE)
    late = sorted(n for n in sys.modules if n.startswith("nemo_automodel") and n not in before)
    if late:  # imported against the stubbed transformers: add them to AUTOMODEL_MODULES
        raise RuntimeError(f"nemo_automodel modules first imported under the stubs: {late}")
    return module
