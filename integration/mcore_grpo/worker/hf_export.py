"""The worker's model out as a Hugging Face checkpoint, through Megatron-Bridge.

The counterpart of `model._build_from_hf`: the bridge is made again from the checkpoint the
model came from (its config, mappings and tokenizer files), and `save_hf_pretrained` gathers
the TP shards and writes `config.json`, the safetensors weights and the source's tokenizer
beside them, so `transformers`' `from_pretrained` (and a generation backend) loads the trained
weights with the tokenizer they were trained with. Collective: every rank of the run calls it
(each TP group gathers its shards); global rank 0 writes.
"""

from __future__ import annotations

from pathlib import Path

import torch

from mcore_grpo.worker.bridge_source import import_auto_bridge
from mcore_grpo.worker.config import WorkerConfig
from mcore_grpo.worker.cpu import cpu_device
from mcore_grpo.worker.sdpa_attention import SDPADotProductAttention


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The GPTModel inside DDP / Float16Module wrappers (each keeps it as `.module`)."""
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module
    return model


def register_worker_modules() -> None:
    """Tell Bridge the tensor-parallel layout of the worker's own module classes: it reads a
    weight's layout from its module's class name, and `build_gpt` switches each local
    `DotProductAttention` to `SDPADotProductAttention` (same state). Bridge registers
    `DotProductAttention` as column-parallel for its only weight, an attention sink's
    `softmax_offset` (one per head: GPT-OSS); without this the export of such a model fails."""
    from megatron.bridge.models.conversion.param_mapping import AutoMapping

    AutoMapping.register_module_type(SDPADotProductAttention.__name__, "column")


def export_hf(config: WorkerConfig, model: torch.nn.Module, path: Path) -> Path:
    """Write `model` (built from `config.model.hf_checkpoint`) to `path` in HF format."""
    source = config.model.hf_checkpoint
    if source is None:
        raise ValueError(
            "a Hugging Face export needs a model built from a Hugging Face checkpoint "
            "(policy.model_name); the built-in tiny GPT (tiny-gpt) has no Hugging Face format"
        )
    dtype = torch.bfloat16 if config.precision == "bfloat16" else torch.float32
    bridge = import_auto_bridge().from_hf_pretrained(source, torch_dtype=dtype)
    register_worker_modules()
    with cpu_device(config.device), torch.no_grad():
        bridge.save_hf_pretrained([unwrap(model)], str(path), show_progress=False)
    return path
