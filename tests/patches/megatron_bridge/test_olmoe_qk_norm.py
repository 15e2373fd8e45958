"""Tripwire for patches/Megatron-Bridge/olmoe-qk-norm-gqa-tp-and-local-experts.patch.

OLMoE's q/k RMSNorm spans the whole projection (HF `q_norm`: num_heads * head_dim, `k_norm`:
num_key_value_heads * head_dim), megatron-core's is per head, so OlMoEBridge's
`OLMoESelfAttention` builds its own. Unpatched:
- `k_layernorm` is sized num_attention_heads * head_dim, so any GQA checkpoint fails to load
  ("Shape mismatch for megatron param decoder.layers.0.self_attention.k_layernorm.weight");
- at TP > 1 each rank holds only its heads, and the full-width norm fails on the local slice;
- the local spec's SequentialMLP experts (`mlp.experts.local_experts.<i>.linear_fc{1,2}`,
  without Transformer Engine / grouped GEMM) have no mapping.
With the patch a GQA OLMoE builds and matches transformers at TP=1 and TP=2, and the q/k-norm
weights get the same gradient at TP=2 as at TP=1 (the norm runs on the gathered heads; the
replicated weights' gradients are averaged over TP, not summed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import torch

from tests.support.python_process import run_ranks

# Each rank: `python -c` forked warm (tests/support/python_process.py); argv PORT RANK ...
WORKER = """
import sys
from tests.patches.megatron_bridge._olmoe_tp_worker import main
main(int(sys.argv[2]), 2, int(sys.argv[1]), sys.argv[3], sys.argv[4])
"""


def test_olmoe_k_norm_has_the_key_heads_and_experts_map(mcore_device: str) -> None:
    from megatron.bridge.models.gpt_provider import GPTModelProvider
    from megatron.bridge.models.olmoe.olmoe_bridge import OlMoEBridge
    from megatron.bridge.models.olmoe.olmoe_provider import olmoe_layer_spec
    from megatron.core.transformer.spec_utils import build_module

    provider = GPTModelProvider(
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_query_groups=2,
        ffn_hidden_size=128,
        qk_layernorm=True,
        normalization="RMSNorm",
        num_moe_experts=4,
        moe_ffn_hidden_size=32,
        moe_router_topk=2,
        moe_grouped_gemm=False,
        moe_token_dispatcher_type="allgather",
        add_bias_linear=False,
        gated_linear_unit=True,
        use_cpu_initialization=True,
    )
    provider.finalize()
    layer = cast(Any, build_module(olmoe_layer_spec(provider), config=provider, layer_number=2))
    attn = layer.self_attention
    assert attn.q_layernorm.weight.shape == (64,)  # 4 heads x 16
    assert attn.k_layernorm.weight.shape == (32,)  # 2 key heads x 16 (HF k_norm)

    registry = OlMoEBridge().mapping_registry()
    names = [f"decoder.layers.1.{n}" for n, _ in layer.named_parameters()]
    assert any(".local_experts.3.linear_fc1." in n for n in names)
    unmapped = [n for n in names if registry.megatron_to_hf_lookup(n) is None]
    assert not unmapped, unmapped


@pytest.mark.timeout(900)
def test_olmoe_gqa_tp2_matches_transformers_and_tp1_grads(tmp_path: Path) -> None:
    from model_matrix import families

    checkpoint = tmp_path / "olmoe"
    families.write_checkpoint(checkpoint, "OlmoeForCausalLM")  # 4 heads, 2 KV heads, 4 experts
    result = tmp_path / "result.pt"
    run_ranks(WORKER, 2, str(checkpoint), str(result))
    out = torch.load(result)
    assert out["tp1"] <= 1e-4 and out["tp2"] <= 1e-4, out
    assert out["qk_grad"] <= 1e-5, out
