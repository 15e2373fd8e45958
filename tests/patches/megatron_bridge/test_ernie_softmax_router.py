"""Tripwire for patches/Megatron-Bridge/ernie-softmax-router.patch: ERNIE routes by softmax.

Ernie45Bridge set `moe_router_score_function = "sigmoid"` (ernie_45_bridge.py, "same as
DeepSeek V3"), but transformers' Ernie4_5_MoeTopKRouter takes the softmax over all experts,
selects by softmax + e_score_correction_bias and renormalizes the selected probabilities. A
random checkpoint from the config class hides it (the router weight is initialised to zeros, so
sigmoid and softmax weights are both uniform); a trained router does not. Needs the
Megatron-LM patch that allows an expert bias with softmax scores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import torch


def _checkpoint(path: Path) -> int:
    from mcore_grpo.grpo.policy_model.hf_model import task_hf_tokenizer
    from transformers import Ernie4_5_MoeConfig, Ernie4_5_MoeForCausalLM

    torch.manual_seed(0)
    config = cast(Any, Ernie4_5_MoeConfig)(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=128,
        moe_intermediate_size=32,
        moe_num_experts=4,
        moe_k=2,
        moe_num_shared_experts=1,
        moe_layer_start_index=1,
    )
    model = Ernie4_5_MoeForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("mlp.gate.weight"):  # a trained router, not the zero init
                param.normal_(0.0, 0.5)
            elif name.endswith("e_score_correction_bias"):
                param.copy_(torch.tensor([[0.3, -0.2, 0.1, 0.0]]))
    model.save_pretrained(path)
    task_hf_tokenizer().save_pretrained(path)
    return config.vocab_size


def test_ernie_router_matches_transformers(gloo_world: None, tmp_path: Path) -> None:
    from model_matrix import checks

    vocab = _checkpoint(tmp_path / "ernie")
    assert checks.logits_difference(tmp_path / "ernie", 1, 1, vocab) <= 1e-4
