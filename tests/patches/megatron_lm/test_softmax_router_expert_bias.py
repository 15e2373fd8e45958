"""Tripwire for patches/Megatron-LM/moe-softmax-router-expert-bias.patch.

ERNIE 4.5-MoE routes by softmax over all experts, picks the top-k of softmax + expert bias
(`moe_statics.e_score_correction_bias`) and weights the picked experts by their softmax
probabilities renormalized over the top-k (transformers' Ernie4_5_MoeTopKRouter). megatron-core
refused `moe_router_enable_expert_bias` with the softmax score function (transformer_config.py)
and its softmax branch of `topk_routing_with_score_function` ignored `expert_bias`
(moe_utils.py), so the routing had no megatron-core equivalent. With the patch both are allowed
and the bias moves the selection only.
"""

from __future__ import annotations

import pytest
import torch


def _reference(logits: torch.Tensor, bias: torch.Tensor, topk: int) -> torch.Tensor:
    """transformers' own Ernie4_5_MoeTopKRouter (the oracle) on these router logits (an identity
    gate over one-hot features), as dense [tokens, experts] routing probabilities."""
    from transformers import Ernie4_5_MoeConfig
    from transformers.models.ernie4_5_moe.modeling_ernie4_5_moe import Ernie4_5_MoeTopKRouter

    experts = logits.shape[1]
    config = Ernie4_5_MoeConfig(hidden_size=experts, moe_num_experts=experts, moe_k=topk)
    router = Ernie4_5_MoeTopKRouter(config)
    with torch.no_grad():
        router.weight.copy_(torch.eye(experts))
        router.moe_statics.e_score_correction_bias.copy_(bias[None, :])
    _, selected, weights = router(logits)
    return torch.zeros_like(logits).scatter(1, selected, weights.float())


def test_softmax_scores_with_expert_bias_select_by_biased_scores() -> None:
    from megatron.core.transformer.moe.moe_utils import topk_routing_with_score_function

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(16, 8, generator=g)
    bias = torch.zeros(8)
    bias[[1, 6]] = 1.0  # large enough to change every token's top-2
    probs, routing_map = topk_routing_with_score_function(
        logits, 2, use_pre_softmax=False, score_function="softmax", expert_bias=bias
    )
    expected = _reference(logits, bias, 2)
    torch.testing.assert_close(probs, expected, rtol=0, atol=1e-6)
    assert torch.equal(routing_map, expected > 0)


def test_softmax_score_function_accepts_expert_bias() -> None:
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(
        num_layers=1,
        hidden_size=64,
        num_attention_heads=4,
        num_moe_experts=4,
        moe_router_topk=2,
        moe_router_score_function="softmax",
        moe_router_enable_expert_bias=True,
        moe_router_dtype="fp32",
    )
    assert config.moe_router_enable_expert_bias


@pytest.mark.parametrize("score_function", ["softmax"])
def test_softmax_without_bias_unchanged(score_function: str) -> None:
    from megatron.core.transformer.moe.moe_utils import topk_routing_with_score_function

    logits = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))
    probs, _ = topk_routing_with_score_function(logits, 2, score_function=score_function)
    torch.testing.assert_close(probs, _reference(logits, torch.zeros(8), 2), rtol=0, atol=1e-6)
