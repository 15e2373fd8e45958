"""Import NeMo-RL's DTensor v2 worker with the real nemo_automodel (the `nemo-rl-automodel` group).

The v2 worker's training loop runs nemo_automodel code (`scale_grads_and_clip_grad_norm`, the
train context, `to_local_if_dtensor`), so its tripwire needs the real package, not the stub
`heavy_import_stubs.py` gives. nemo-automodel 0.4.0 is installed without its dependencies
(pyproject.toml: `[[tool.uv.dependency-metadata]]`) and imports on this project's torch 2.15 /
transformers 5.8.1 with ONE exception, worked around here:

- `nemo_automodel.components._peft.lora_kernel` raises at import under triton 3.9 (the version
  torch 2.15 requires); it is imported on its own no-triton path first, by the same function the
  NeMo-RL driver uses: `mcore_grpo.grpo.nemo_rl.automodel_compat` says why and how.

The worker module itself is imported under `heavy_import_stubs.stubbed_imports` with every stub
except nemo_automodel: nemo_automodel's modules are imported first, against the real
transformers, and the stubbed NeMo-RL imports then find them already loaded.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from mcore_grpo.grpo.nemo_rl.automodel_compat import import_lora_kernel_without_triton

from tests.patches.nemo_rl.heavy_import_stubs import STUBBED_PACKAGES, stubbed_imports

V2_WORKER_MODULE = "nemo_rl.models.policy.workers.dtensor_policy_worker_v2"

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


def import_automodel() -> None:
    """Import every nemo_automodel module the v2 worker needs, against the real transformers."""
    import_lora_kernel_without_triton()
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
