"""`SDPADotProductAttention` against megatron-core's own `DotProductAttention` (the oracle):
outputs and gradients on the masks the worker passes (causal, causal + left padding, a
one-token decode step over a cache), grouped-query heads, and the cases it hands back."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from mcore_grpo.worker.sdpa_attention import SDPADotProductAttention, use_sdpa

HEADS, GROUPS, HEAD_DIM, BATCH = 6, 2, 16, 3


def _pair(**config: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    """megatron's attention and the same module switched to SDPA."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig

    tcfg = TransformerConfig(
        num_layers=1,
        hidden_size=HEADS * HEAD_DIM,
        num_attention_heads=HEADS,
        num_query_groups=GROUPS,
        kv_channels=HEAD_DIM,
        attention_dropout=0.0,
        masked_softmax_fusion=False,
        **config,
    )
    reference = DotProductAttention(tcfg, 1, AttnMaskType.causal, "self")
    fast = DotProductAttention(tcfg, 1, AttnMaskType.causal, "self")
    assert use_sdpa(fast) == 1 and isinstance(fast, SDPADotProductAttention)
    return reference, fast


def _qkv(sq: int, sk: int) -> list[torch.Tensor]:
    g = torch.Generator(torch.get_default_device()).manual_seed(0)
    q = torch.randn(sq, BATCH, HEADS, HEAD_DIM, generator=g)
    k = torch.randn(sk, BATCH, GROUPS, HEAD_DIM, generator=g)
    v = torch.randn(sk, BATCH, GROUPS, HEAD_DIM, generator=g)
    return [t.requires_grad_(True) for t in (q, k, v)]


def _causal_padding_mask(sq: int, pads: list[int]) -> torch.Tensor:
    """[B, 1, S, S], True = masked: causal, plus each row's `pads` left pad keys."""
    causal = torch.ones(sq, sq, dtype=torch.bool).triu(1)
    keys = torch.arange(sq)[None, :] < torch.tensor(pads)[:, None]
    return causal[None, None] | keys[:, None, None, :]


def _outputs_and_grads(
    module: torch.nn.Module, mask: torch.Tensor | None, rows: torch.Tensor, sq: int, sk: int
) -> list[torch.Tensor]:
    q, k, v = _qkv(sq, sk)
    out = module(q, k, v, mask)
    # Only queries with an unmasked key: a fully masked row's average differs (never scored).
    weights = torch.randn(out.shape, generator=torch.Generator(out.device).manual_seed(1)) * rows
    (out * weights).sum().backward()
    grads = [t.grad for t in (q, k, v)]
    assert all(g is not None for g in grads)
    return [out * rows, *(g for g in grads if g is not None)]


@pytest.mark.parametrize(
    ("name", "sq", "sk", "pads"),
    [
        ("causal", 7, 7, None),
        ("causal + left padding", 7, 7, [0, 2, 4]),
        ("decode", 1, 9, [1, 0, 3]),
    ],
)
def test_equals_megatrons_attention_with_gradients(
    tp1: None, name: str, sq: int, sk: int, pads: list[int] | None
) -> None:
    reference, fast = _pair()
    rows = torch.ones(sq, BATCH, 1)
    mask = None
    if pads is not None and sq > 1:
        mask = _causal_padding_mask(sq, pads)
        for b, pad in enumerate(pads):
            rows[:pad, b] = 0  # pad queries see only pad keys
    elif pads is not None:
        # A decode step: [B, 1, 1, sk] key padding, as the cached sampler passes it.
        mask = (torch.arange(sk)[None, :] < torch.tensor(pads)[:, None])[:, None, None, :]
    expected = _outputs_and_grads(reference, mask, rows, sq, sk)
    got = _outputs_and_grads(fast, mask, rows, sq, sk)
    for e, g in zip(expected, got, strict=True):
        assert g.shape == e.shape
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    # The test can tell the two masks apart: without the padding the outputs move.
    if mask is not None:
        unpadded = fast(*_qkv(sq, sk), torch.zeros_like(mask))
        assert not torch.allclose(unpadded * rows, expected[0], atol=1e-3)


def test_hands_back_what_it_does_not_cover(tp1: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    calls: list[str] = []
    original = DotProductAttention.forward

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append("megatron")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DotProductAttention, "forward", spy)
    _, fast = _pair()
    q, k, v = _qkv(5, 5)
    fast(q, k, v, None)
    assert calls == []
    fast(q.bfloat16(), k.bfloat16(), v.bfloat16(), None)  # megatron's fp32-softmax casts
    assert calls == ["megatron"]
    _, windowed = _pair(window_size=(2, 0))
    windowed(q, k, v, None)
    assert calls == ["megatron"] * 2
