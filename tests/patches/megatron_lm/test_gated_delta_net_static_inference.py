"""Tripwire for patches/Megatron-LM/gated-delta-net-static-inference.patch.

megatron-core's `GatedDeltaNet` (Qwen3-Next's and Qwen3.5's linear-attention layers) raised
``NotImplementedError: GDN does not support inference for now`` under a static inference
context (on main too, which added dynamic batching on FLA's kernels only). So these models
could only generate by recomputing the whole prefix for every token. With the patch the prefill
keeps each row's conv and recurrent state and a decode step continues them one token at a time.

The oracle is `transformers`' `Qwen3NextGatedDeltaNet` over the whole sequence; megatron-core
prefills the first tokens and decodes the rest one at a time, at batch 3, with the same
weights. The second case's prefill (66 tokens) crosses a 64-token chunk of the chunked rule.
"""

from __future__ import annotations

import pytest
import torch

from tests.patches.megatron_lm.test_gated_delta_net_without_fla import (
    HIDDEN,
    _hf_layer,
    _load_hf_weights,
    _megatron_layer,
)

BATCH = 3


@pytest.mark.parametrize(("seq_len", "prefill"), [(14, 6), (70, 66)])
def test_gated_delta_net_static_decode_equals_transformers(
    mcore_device: str, seq_len: int, prefill: int
) -> None:
    from megatron.core.inference.contexts import StaticInferenceContext

    hf = _hf_layer()
    megatron = _megatron_layer(mcore_device).eval()
    _load_hf_weights(megatron, hf)

    x = torch.randn(BATCH, seq_len, HIDDEN, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = hf(x)
    steps = [(0, prefill)] + [(t, t + 1) for t in range(prefill, seq_len)]
    context = StaticInferenceContext(max_batch_size=BATCH, max_sequence_length=seq_len)
    hidden = x.transpose(0, 1).contiguous().to(mcore_device)  # [s, b, h]
    outputs = []
    with torch.no_grad():
        for start, end in steps:
            out, _ = megatron(hidden[start:end], None, inference_context=context)
            outputs.append(out.cpu())
            context.increment_sequence_len_offset(end - start)
    torch.testing.assert_close(torch.cat(outputs).transpose(0, 1), expected, rtol=1e-4, atol=1e-5)
