"""Which architectures the model matrix covers, and the tiny random checkpoint of each.

The rows are Megatron-Bridge's supported list at the pin (`AutoBridge.list_supported_models`)
narrowed to text causal LMs (`*ForCausalLM`) whose class the locked `transformers` has. Each is
shrunk generically from its own config class's defaults: the sizes below replace the family's
where the family has the field, and everything else (attention biases, qk-norm, tied
embeddings, soft-capping, sliding windows, MLA ranks, shared experts, dense first layers) stays
the family's own. Heads and experts are chosen so TP=2 and EP=2 divide them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

# Sizes that replace the family's defaults wherever its config has the field. 4 heads / 2 KV
# heads and 4 experts so TP=2 and EP=2 divide them; MLA ranks small but distinct.
TINY_SIZES: dict[str, Any] = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 128,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "num_experts": 4,
    "n_routed_experts": 4,
    "num_local_experts": 4,
    "moe_num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_k": 2,
    "n_shared_experts": 1,
    "moe_num_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "q_lora_rank": 32,
    "kv_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "sliding_window": 8,
    "decoder_sparse_step": 1,
    "moe_shared_expert_intermediate_size": 32,
    # State-space and linear-attention mixers (Falcon-H1, Nemotron-H, Qwen3-Next, Qwen3.5).
    "mamba_n_heads": 8,
    "mamba_d_head": 8,
    "mamba_d_ssm": 64,
    "mamba_d_state": 16,
    "mamba_chunk_size": 16,
    "mamba_n_groups": 2,  # megatron-core splits the groups across TP ranks
    "mamba_num_heads": 8,
    "mamba_head_dim": 8,
    "ssm_state_size": 16,
    "n_groups": 2,
    "chunk_size": 16,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
}

# Per-architecture settings on top of TINY_SIZES, each for a stated reason.
OVERRIDES: dict[str, dict[str, Any]] = {
    # Falcon-H1's released checkpoints (0.5B to 34B, H1R) set mamba_norm_before_gate false;
    # the config class's default is true, which megatron-core's MambaMixer refuses with or
    # without Transformer Engine (`assert not self.norm_before_gate`). Kept as released.
    "FalconH1ForCausalLM": {"mamba_norm_before_gate": False},
    # GLM-5: released configs set rope_interleave (GLM-5.1, 5.2) and indexer_rope_interleave
    # (5.2) true, fields the config class does not define. index_topk 4 of the 12 tokens, so the
    # indexer's choice changes the logits (the default, 2048, selects every key at this length).
    "GlmMoeDsaForCausalLM": {
        "rope_interleave": True,
        "indexer_rope_interleave": True,
        "index_topk": 4,
    },
    # DeepSeek-V4's compressed layers use YaRN in every released checkpoint (Flash, Pro:
    # factor 16 from 65,536 to 1,048,576 positions); the config class's default has plain RoPE.
    # Kept, at the tiny model's length (factor x original = max_position_embeddings).
    "DeepseekV4ForCausalLM": {
        "rope_parameters": {
            "rope_type": "yarn",
            "factor": 16,
            "original_max_position_embeddings": TINY_SIZES["max_position_embeddings"] // 16,
            "beta_fast": 32,
            "beta_slow": 1,
        }
    },
}


# Where upstream stands on a row that fails, measured in the upstream repositories (the page
# prints it under the row's error).
UPSTREAM_STATUS: dict[str, str] = {
    "DeepseekV4ForCausalLM": (
        "Bridge's DeepSeekV4Bridge sets experimental_attention_variant='dsv4_hybrid', which "
        "megatron-core has only on its dev branch (deepseek_v4_hybrid_attention.py, dev at "
        "d48bd6be, 2026-08-21): not at the pin 14346b65 nor on main at d98e8a64 (2026-08-22). "
        "A port of that branch's attention is not a patch this series can carry."
    ),
}

# Architectures measured with sequence parallelism at TP > 1, each for a stated reason.
# GLM-5: megatron-core's absorbed MLA asserts it ("AbsorbedMLA requires sequence_parallel when
# tensor_model_parallel_size > 1"), as DeepSeek-V3.2 and GLM-5 are trained.
SEQUENCE_PARALLEL: frozenset[str] = frozenset({"GlmMoeDsaForCausalLM"})


def architecture(checkpoint: Path) -> str:
    """The architecture `checkpoint`'s config.json names."""
    from mcore_grpo.worker.hf_checkpoint import read_hf_config

    return str((read_hf_config(str(checkpoint)) or {})["architectures"][0])


@dataclass(frozen=True)
class Row:
    """One architecture of Bridge's list: in the matrix, or outside it and why."""

    architecture: str
    bridge: str  # the Bridge class that maps it
    in_matrix: bool
    reason: str = ""  # why it is outside the matrix


def rows(supported: Sequence[str]) -> list[Row]:
    """Every architecture in Bridge's `supported` list, in the matrix or not (sorted)."""
    import transformers

    out = []
    for arch in sorted(supported):
        bridge = bridge_class(arch)
        if not arch.endswith("ForCausalLM"):
            out.append(Row(arch, bridge, False, "not a text causal LM (vision, audio or other)"))
        elif getattr(transformers, arch, None) is None:
            out.append(
                Row(arch, bridge, False, f"transformers {transformers.__version__} has no class")
            )
        else:
            out.append(Row(arch, bridge, True))
    return out


def bridge_class(arch: str) -> str:
    """The name of the Megatron-Bridge class registered for `arch` ('' if none found)."""
    from megatron.bridge.models.conversion.model_bridge import get_model_bridge

    # The registry AutoBridge.list_supported_models reads; an entry makes a bridge instance.
    # Keys are HF classes or, for architectures only reachable through auto_map, their names.
    registry = getattr(get_model_bridge, "_exact_types", {})
    for key, impl in registry.items():
        if getattr(key, "__name__", key) == arch:
            return type(impl(arch)).__name__
    return ""


def tiny_config(arch: str, overrides: dict[str, Any] | None = None) -> Any:
    """The `transformers` config of the tiny `arch` model: its class's defaults, resized, then
    `overrides` (a test's variant of the family: released multipliers, another norm)."""
    import transformers

    config_class = getattr(transformers, arch).config_class
    defaults = config_class().to_dict()
    sizes = {k: v for k, v in TINY_SIZES.items() if k in defaults}
    if "qk_rope_head_dim" in defaults:
        # MLA: the rotary part of a head is its head_dim, and keys have every head (the real
        # checkpoints set num_key_value_heads = num_attention_heads).
        sizes["head_dim"] = sizes["qk_rope_head_dim"]
        sizes["num_key_value_heads"] = sizes["num_attention_heads"]
    for key in ("layer_types", "mlp_layer_types"):  # attention and MLP (dense / MoE) kinds
        kinds = defaults.get(key)
        if kinds:  # the first two kinds the family interleaves (Gemma 3: 5 sliding, then full)
            sizes[key] = (list(dict.fromkeys(kinds)) * 2)[:2]
    sizes.update(OVERRIDES.get(arch, {}))
    sizes.update(overrides or {})
    return config_class(architectures=[arch], **sizes)


def features(config: Any, parameter_names: Sequence[str]) -> list[str]:
    """What the tiny model keeps of its family, read from its config and its weights' names."""
    get = config.to_dict().get
    found = []
    heads, groups = get("num_attention_heads"), get("num_key_value_heads")
    if get("kv_lora_rank"):
        found.append("MLA")
    elif groups and heads and groups < heads:
        found.append("GQA")
    if any(".indexer." in n for n in parameter_names):  # DeepSeek's lightning indexer (DSA)
        found.append("sparse attention")
    if any(".experts." in n for n in parameter_names):  # configs name the field many ways
        found.append("MoE")
    if any("shared_expert" in n for n in parameter_names):
        found.append("shared experts")
    if "MoE" in found and get("first_k_dense_replace"):
        found.append("dense first layers")
    if get("tie_word_embeddings"):
        found.append("tied embeddings")
    if any(
        n.endswith(("q_proj.bias", "qkv_proj.bias", "query_key_value.bias"))
        for n in parameter_names
    ):
        found.append("attention bias")
    if any(n.endswith(("q_norm.weight", "q_layernorm.weight")) for n in parameter_names):
        found.append("qk-norm")
    if get("attn_logit_softcapping") or get("final_logit_softcapping"):
        found.append("soft-capping")
    if get("sliding_window") and (get("use_sliding_window", True) is not False):
        found.append("sliding window")
    if any(t != "full_attention" for t in get("layer_types") or ()):
        found.append("mixed layer types")
    return found


def write_checkpoint(
    path: Path, arch: str, seed: int = 0, overrides: dict[str, Any] | None = None
) -> list[str]:
    """`save_pretrained` of a random tiny `arch` model at `path` (fp32) and of the digit task's
    tokenizer (< 256 ids) beside it; the model's `features`. Every
    norm weight and bias is moved off its initial value, so a weight the conversion fails to
    map shows."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = tiny_config(arch, overrides)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                param.add_(0.1 * torch.randn_like(param))
    model.save_pretrained(path)
    # A checkpoint carries its tokenizer; Bridge's export copies it and fails without one.
    from mcore_grpo.grpo.policy_model.hf_model import task_hf_tokenizer

    task_hf_tokenizer().save_pretrained(path)
    return features(config, [name for name, _ in model.named_parameters()])
