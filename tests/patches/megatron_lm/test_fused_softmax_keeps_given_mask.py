"""Tripwire for patches/Megatron-LM/fused-softmax-keeps-given-mask.patch.

megatron-core's local attention (`DotProductAttention`, the spec without Transformer Engine)
softmaxes through `FusedScaleMaskSoftmax`. In fp16/bf16 with `masked_softmax_fusion` (the
default) and the CUDA extensions present, the causal mask type took the upper-triangular kernel,
which takes no mask: the mask it was given was dropped. The worker gives causal + key-padding
masks for left-padded prompts, so on such a GPU run every padded row attended its padding; the
torch path (CPU, fp32) applies the given mask, so the two paths disagreed. With the patch a given
mask takes the masked kernel.

Where the CUDA extensions are absent (this machine) both kernels are replaced by torch
references of what they compute, so the test checks which kernel the attention takes and what
it then returns; with them (a GPU with apex or megatron's fused kernels) the real kernels run.
The oracle is torch's `scaled_dot_product_attention` with the same boolean mask.
"""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

HEADS, DIM, SEQ, BATCH, PAD = 4, 8, 32, 2, 5


def _install_reference_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    from megatron.core.fusions import fused_softmax
    from megatron.core.transformer.utils import get_default_causal_mask

    def masked(scores: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
        probs = torch.softmax(scores.float().masked_fill(mask, -10000.0) * scale, dim=-1)
        return probs.to(scores.dtype)

    def upper_triangular(scores: torch.Tensor, scale: float) -> torch.Tensor:
        causal = get_default_causal_mask(scores.size(-1)).to(scores.device)
        probs = torch.softmax(scores.float().masked_fill(causal, -10000.0) * scale, dim=-1)
        return probs.to(scores.dtype)

    monkeypatch.setattr(fused_softmax.ScaledMaskedSoftmax, "apply", masked)
    monkeypatch.setattr(fused_softmax.ScaledUpperTriangMaskedSoftmax, "apply", upper_triangular)
    monkeypatch.setattr(
        fused_softmax.FusedScaleMaskSoftmax,
        "get_batch_per_block",
        staticmethod(lambda sq, sk, b, np: 4),
    )


def test_fused_local_attention_keeps_the_padding_mask(
    mcore_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.utils import get_default_causal_mask

    kernels = all(
        importlib.util.find_spec(name) is not None
        for name in ("scaled_masked_softmax_cuda", "scaled_upper_triang_masked_softmax_cuda")
    )
    if not (kernels and mcore_device == "cuda"):
        _install_reference_kernels(monkeypatch)
    config = TransformerConfig(
        num_layers=1,
        hidden_size=HEADS * DIM,
        num_attention_heads=HEADS,
        use_cpu_initialization=True,
        fp16=True,
        masked_softmax_fusion=True,
        attention_softmax_in_fp32=True,
        attention_dropout=0.0,
    )
    attention = DotProductAttention(
        config=config, layer_number=1, attn_mask_type=AttnMaskType.causal, attention_type="self"
    ).to(mcore_device)
    assert attention.scale_mask_softmax.scaled_masked_softmax_fusion

    g = torch.Generator().manual_seed(0)
    query, key, value = (
        torch.randn(SEQ, BATCH, HEADS, DIM, generator=g).half().to(mcore_device) for _ in range(3)
    )
    mask = get_default_causal_mask(SEQ).expand(BATCH, 1, SEQ, SEQ).clone()
    mask[1, :, :, :PAD] = True  # row 1 is left-padded by PAD tokens
    mask = mask.to(mcore_device)
    out = attention(query, key, value, attention_mask=mask).float()

    q, k, v = (t.float().permute(1, 2, 0, 3) for t in (query, key, value))  # [b, heads, s, d]
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=~mask, scale=1 / math.sqrt(DIM)
    )
    expected = expected.permute(2, 0, 1, 3).reshape(SEQ, BATCH, HEADS * DIM)
    # Only queries at real tokens: a padding query attends nothing real on either side.
    torch.testing.assert_close(out[PAD:], expected[PAD:], rtol=2e-3, atol=2e-3)
