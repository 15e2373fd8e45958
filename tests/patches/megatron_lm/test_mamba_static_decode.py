"""Tripwire for patches/Megatron-LM/mamba-static-decode.patch.

megatron-core's static-batching Mamba decode (`MambaMixer._static_decode`, what
`StaticInferenceContext` generation runs for NemotronH and Falcon-H1) was broken three ways:
- it handed `ssm_decode` the [1, b, d] step where that takes [b, s, d], so a batch of b rows
  was decoded as one row of b tokens;
- its PyTorch fallback squeezed the gate `z` and not the output, so the gated norm broadcast
  [b, 1, d] against [b, d] into [b, b, d];
- the fallback was unreachable: the Triton kernels it stands in for are importable without
  Triton (as stubs) and without a GPU, so decode on CPU tensors called Triton and failed.

The oracle is `transformers`' NemotronH mixer (`NemotronHMamba2Mixer.torch_forward`) over the
whole sequence; megatron-core prefills the first tokens and decodes the rest one at a time,
at batch 3, with the same weights.
"""

from __future__ import annotations

import torch

from tests.patches.megatron_lm.test_mamba_without_mamba_ssm import (
    HIDDEN,
    _hf_mixer,
    _load_hf_weights,
    _megatron_mixer,
)

BATCH, SEQ, PREFILL = 3, 14, 6


def test_mamba_static_decode_equals_transformers_full_forward(mcore_device: str) -> None:
    from megatron.core.inference.contexts import StaticInferenceContext
    from megatron.core.inference.utils import InferenceMode

    hf = _hf_mixer()
    megatron = _megatron_mixer(mcore_device).eval()
    _load_hf_weights(megatron, hf)
    megatron.layer_number = 1  # the key of its state in the inference context

    x = torch.randn(BATCH, SEQ, HIDDEN, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = hf.torch_forward(x)
    steps = [(0, PREFILL)] + [(t, t + 1) for t in range(PREFILL, SEQ)]
    context = StaticInferenceContext(max_batch_size=BATCH, max_sequence_length=SEQ)
    hidden = x.transpose(0, 1).contiguous().to(mcore_device)  # [s, b, h]
    outputs = []
    with torch.no_grad(), InferenceMode.active():
        for start, end in steps:
            # Set by the hybrid stack before its layers; the mixer reads it.
            context.seqlen_offset = context.sequence_len_offset  # pyrefly: ignore[missing-attribute]
            out, _ = megatron(hidden[start:end], inference_context=context)
            outputs.append(out.cpu())
            context.increment_sequence_len_offset(end - start)
    got = torch.cat(outputs).transpose(0, 1)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
