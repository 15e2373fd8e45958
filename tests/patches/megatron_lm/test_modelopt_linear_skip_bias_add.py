"""Tripwire for patches/Megatron-LM/modelopt-linear-returns-skipped-bias.patch.

megatron-core's local backend hands out `post_training.modelopt.layers.Linear` for projections
that are duplicated, not split, across tensor-parallel ranks (`LocalSpecProvider.linear()`).
It stands in for the parallel linears, whose contract is `(output, bias)` with `skip_bias_add`
leaving the bias out of the output. Built with `skip_bias_add=True` and a bias, it returned the
biased output alone, a tensor where every caller unpacks a pair: a multimodal projector of type
"affine" on it unpacked the output's first dimension, so two image embeddings came back as one
vector (the two biased rows added), and any other length raised "too many values to unpack".

The oracle is `torch.nn.functional.linear` with the same weight and bias.
"""

from __future__ import annotations

from typing import Any, cast

import torch

HIDDEN, INPUT = 16, 8


def test_affine_projector_on_the_local_linear_keeps_each_row(mcore_device: str) -> None:
    from megatron.core.models.backends import LocalSpecProvider
    from megatron.core.models.vision.multimodal_projector import MultimodalProjector
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.mlp import MLPSubmodules

    config = TransformerConfig(
        num_layers=1,
        hidden_size=HIDDEN,
        num_attention_heads=4,
        use_cpu_initialization=True,
        add_bias_linear=True,
    )
    linear = LocalSpecProvider().linear()
    projector = MultimodalProjector(
        config=config,
        # An affine projector has no second linear, as megatron-core's own projector test builds it.
        submodules=MLPSubmodules(linear_fc1=linear, linear_fc2=None),  # pyrefly: ignore[bad-argument-type]
        projector_type="affine",
        input_size=INPUT,
    ).to(mcore_device)
    encoder = cast(Any, projector.encoder)  # the local Linear (a torch.nn.Linear)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        encoder.bias.copy_(torch.randn(HIDDEN, generator=g))
    for rows in (2, 3):
        x = torch.randn(rows, INPUT, generator=g).to(mcore_device)

        out = projector(x)

        expected = torch.nn.functional.linear(x, encoder.weight, encoder.bias)
        assert out.shape == (rows, HIDDEN)
        torch.testing.assert_close(out, expected)
