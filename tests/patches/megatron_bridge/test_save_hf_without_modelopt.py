"""Tripwire for patches/Megatron-Bridge/save-hf-pretrained-without-modelopt.patch.

`AutoBridge.save_hf_pretrained` (a trained Megatron model out as a Hugging Face checkpoint)
imports `modelopt.torch.quantization.utils.is_quantized` unconditionally, only to ask whether
the model carries ModelOpt quantizers. Without nvidia-modelopt installed (a CPU machine, a
PyTorch-only GPU install) every export fails with `ModuleNotFoundError: No module named
'modelopt'` after the weights were already streamed. With the patch a model is taken as not
quantized when ModelOpt is absent (it cannot carry ModelOpt's quantizers then), and the
checkpoint is written; with ModelOpt installed nothing changes.

In a subprocess with `modelopt` unimportable (it is installed in this environment for NeMo-RL's
own tests; a meta-path finder hides it), Bridge imported from the tree under test: a tiny random Qwen3
checkpoint in, built through this project's worker (`model.hf_checkpoint`), its weights
changed, saved back out, and loaded by `transformers`, whose logits must equal Megatron's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.upstream_tree import upstream_tree

BRIDGE = upstream_tree("Megatron-Bridge")

pytestmark = [
    pytest.mark.skipif(
        not (BRIDGE / "src/megatron/bridge/__init__.py").is_file(),
        reason=f"{BRIDGE} holds no megatron.bridge: run tools/apply_patches.sh",
    ),
]

SCRIPT = """
import importlib.abc
import sys


class NoModelOpt(importlib.abc.MetaPathFinder):
    # nvidia-modelopt is installed here (NeMo-RL's own tests import it): hidden, so the run is
    # a machine without it.
    def find_spec(self, name, path=None, target=None):
        if name == "modelopt" or name.startswith("modelopt."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoModelOpt())
from pathlib import Path
import torch
import torch.distributed as dist
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
from megatron.core import parallel_state
parallel_state.initialize_model_parallel(1, 1)
from mcore_grpo.worker.config import ModelConfig, WorkerConfig
from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
from mcore_grpo.worker.bridge_source import import_auto_bridge
from mcore_grpo.worker.model import build_gpt
from mcore_grpo.worker.tiny_hf_checkpoint import write_tiny_checkpoint
model_parallel_seed(0, "cpu")
work = Path(sys.argv[2])
source = write_tiny_checkpoint(work / "in", "qwen3")
config = WorkerConfig(device="cpu", model=ModelConfig(hf_checkpoint=str(source)))
tokens = torch.randint(0, 256, (2, 12))
with cpu_device("cpu"), torch.no_grad():
    _, model = build_gpt(config)
    for param in model.parameters():
        param.add_(0.01 * torch.randn_like(param))
    ours = model(tokens, torch.arange(12)[None].expand(2, -1), None)
    bridge = import_auto_bridge().from_hf_pretrained(str(source), torch_dtype=torch.float32)
    bridge.save_hf_pretrained([model], str(work / "out"), show_progress=False)
from transformers import AutoModelForCausalLM
theirs = AutoModelForCausalLM.from_pretrained(str(work / "out")).eval()
with torch.no_grad():
    diff = (ours[..., :256] - theirs(tokens).logits).abs().max().item()
print("max logit diff", diff)
"""


@pytest.mark.timeout(600)
def test_save_hf_pretrained_without_modelopt(tmp_path: Path) -> None:
    # Bridge from the tree under test: the installed checkout, or verify's tree on PYTHONPATH.
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(free_port()), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    diff = float(proc.stdout.split("max logit diff")[-1])
    assert diff < 1e-4, proc.stdout
