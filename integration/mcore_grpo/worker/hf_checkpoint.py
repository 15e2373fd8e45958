"""A Hugging Face checkpoint checked before Megatron-Bridge builds it: one line per mistake.

Bridge, given a directory that is not a checkpoint, an architecture it has no mapping for, or a
tensor-parallel size that does not divide the heads, fails deep inside conversion or
megatron-core's asserts. These checks read only `config.json` and say what to change.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcore_grpo.worker.config import ParallelConfig


def read_hf_config(source: str) -> dict[str, Any] | None:
    """`config.json` of a local checkpoint or a Hub id already in the local cache; None when
    it cannot be read here (Bridge then resolves the id and reports on its own)."""
    path = Path(source)
    if path.exists():
        if not (path / "config.json").is_file():
            raise ValueError(
                f"model.hf_checkpoint {path} is not a Hugging Face checkpoint (no config.json): "
                "point it at a directory written by save_pretrained, or at a Hub model id"
            )
        return json.loads((path / "config.json").read_text())
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(source, local_files_only=True).to_dict()
    except (OSError, ValueError):
        return None


def check_architecture(source: str, hf: dict[str, Any], supported: Sequence[str]) -> None:
    """Refuse an architecture Megatron-Bridge has no parameter mapping for."""
    archs = hf.get("architectures") or []
    if not any(a in supported for a in archs):
        named = ", ".join(archs) or "none (config.json has no `architectures`)"
        raise ValueError(
            f"model.hf_checkpoint {source}: architecture {named} has no Megatron-Bridge mapping "
            f"at the pinned Bridge; use a checkpoint of one of its {len(supported)} supported "
            f"architectures ({', '.join(sorted(supported))}); docs/models.md says which of them "
            "convert on CPU, at which layouts"
        )


def check_parallel_layout(source: str, hf: dict[str, Any], parallel: ParallelConfig) -> None:
    """Refuse a tensor-parallel size that does not divide the attention or key-value heads."""
    tp = parallel.tensor_model_parallel_size
    heads = hf.get("num_attention_heads")
    groups = hf.get("num_key_value_heads") or heads
    if not isinstance(heads, int) or not isinstance(groups, int):
        return
    if heads % tp or groups % tp:
        fits = [d for d in range(1, groups + 1) if heads % d == 0 and groups % d == 0]
        raise ValueError(
            f"model.hf_checkpoint {source}: tensor_model_parallel_size {tp} does not divide its "
            f"{heads} attention heads and {groups} key-value heads; set "
            f"policy.megatron_cfg.tensor_model_parallel_size to one of {fits}"
        )
