"""Tiny random Hugging Face checkpoints, written locally with `transformers` (no download).

What the Megatron-Bridge path is tested and demonstrated on without a GPU or network: real HF
architectures (Qwen2/Qwen2.5-style: qkv bias; Qwen3-style: q/k norms, explicit head_dim;
Llama/SmolLM2-style: tied embeddings, GQA 6:3 so TP=3 divides it, rope theta 1e5) at a
few hundred thousand parameters. Every norm weight and bias is moved off its initial value
(ones/zeros), so a weight the conversion fails to map cannot go unnoticed by a logits check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch

Arch = Literal["qwen2", "qwen3", "qwen3_moe", "llama"]
ARCHS: tuple[Arch, ...] = ("qwen2", "qwen3", "qwen3_moe", "llama")


def tiny_config(arch: Arch = "qwen2") -> Any:
    """The `transformers` config of the 2-layer `arch` model (fp32, GQA 4:2, vocab 256)."""
    from transformers import Qwen2Config, Qwen3Config, Qwen3MoeConfig

    shape = dict(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    if arch == "qwen2":
        return Qwen2Config(architectures=["Qwen2ForCausalLM"], **shape)
    if arch == "qwen3":
        return Qwen3Config(architectures=["Qwen3ForCausalLM"], head_dim=16, **shape)
    if arch == "llama":  # SmolLM2-135M-Instruct's family, shrunk (its heads are 9:3)
        from transformers import LlamaConfig

        # TP 3 must split the embedding rows (Bridge pads no HF vocab) and the MLP evenly.
        llama = {
            **shape,
            "num_attention_heads": 6,
            "num_key_value_heads": 3,
            "vocab_size": 264,
            "intermediate_size": 192,
        }
        return LlamaConfig(
            architectures=["LlamaForCausalLM"],
            head_dim=16,
            rope_parameters={"rope_theta": 100000.0, "rope_type": "default"},
            **{**llama, "hidden_size": 96, "tie_word_embeddings": True},
        )
    if arch == "qwen3_moe":  # Qwen3-30B-A3B's family: 4 experts, top-2, every layer sparse
        moe: dict[str, Any] = dict(
            architectures=["Qwen3MoeForCausalLM"],
            head_dim=16,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            norm_topk_prob=True,
            **shape,
        )
        return Qwen3MoeConfig(**moe)
    raise ValueError(f"unknown tiny architecture {arch!r}: choose one of {', '.join(ARCHS)}")


def write_tiny_checkpoint(
    path: Path, arch: Arch = "qwen2", seed: int = 0, tokenizer: Any = None
) -> Path:
    """`save_pretrained` of a random `tiny_config(arch)` model at `path`, and of `tokenizer`
    (a `transformers` tokenizer, at most 256 ids) beside it when given."""
    from transformers import AutoModelForCausalLM

    config = tiny_config(arch)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                param.add_(0.1 * torch.randn_like(param))
    if tokenizer is not None:
        if len(tokenizer) > config.vocab_size:
            raise ValueError(
                f"a tokenizer of {len(tokenizer)} ids does not fit the tiny model's "
                f"{config.vocab_size}-row embedding"
            )
        tokenizer.save_pretrained(path)
    model.save_pretrained(path)  # fp32: the default dtype of a fresh model
    return path
