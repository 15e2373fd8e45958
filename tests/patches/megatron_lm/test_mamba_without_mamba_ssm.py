"""Tripwire for patches/Megatron-LM/mamba-without-mamba-ssm.patch.

megatron-core's `MambaMixer` (NemotronH's and FalconH1's Mamba-2 layers) refused to be built
without mamba-ssm (``ImportError: MambaSSM is not installed``), and its gated RMSNorm was a
`MagicMock` then. Its non-memory-efficient path already runs the causal conv1d in torch
(`F.conv1d` where causal-conv1d is absent); only mamba-ssm's SSD scan
(`mamba_chunk_scan_combined`) and gated RMSNorm had no torch equivalent. Both kernels are
Triton: no CPU.

With the patch, a missing mamba-ssm selects that path with torch-native scan and norm. The
oracle is `transformers`' own NemotronH mixer (`NemotronHMamba2Mixer.torch_forward`, its path
without the CUDA kernels, a chunked SSD) with the same weights: outputs, input gradients and
``A_log`` gradients within fp32 tolerance, at a sequence shorter than one chunk and at one
spanning three.
"""

from __future__ import annotations

import pytest
import torch

HIDDEN, HEADS, HEAD_DIM, GROUPS, STATE, KERNEL, CHUNK, BATCH = 32, 4, 16, 2, 8, 4, 64, 2


def _hf_mixer():
    from transformers import NemotronHConfig
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMamba2Mixer

    config = NemotronHConfig(
        hidden_size=HIDDEN,
        mamba_num_heads=HEADS,
        mamba_head_dim=HEAD_DIM,
        n_groups=GROUPS,
        ssm_state_size=STATE,
        conv_kernel=KERNEL,
        chunk_size=CHUNK,
        layer_norm_epsilon=1e-5,
        use_bias=False,
        use_conv_bias=True,
        mamba_hidden_act="silu",
        use_mamba_kernels=False,
    )
    torch.manual_seed(0)
    mixer = NemotronHMamba2Mixer(config, layer_idx=0).float()
    with torch.no_grad():  # away from the init values, so every parameter matters
        for param in mixer.parameters():
            param.add_(0.1 * torch.randn_like(param))
    return mixer


def _megatron_mixer(device: str):
    from megatron.core import parallel_state
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.ssm.mamba_mixer import MambaMixer, MambaMixerSubmodules
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer import TransformerConfig

    config = TransformerConfig(
        num_layers=1,
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        use_cpu_initialization=True,
        mamba_state_dim=STATE,
        mamba_head_dim=HEAD_DIM,
        mamba_num_groups=GROUPS,
        mamba_num_heads=HEADS,
    )
    submodules = MambaMixerSubmodules(in_proj=ColumnParallelLinear, out_proj=RowParallelLinear)
    groups = ProcessGroupCollection(
        tp=parallel_state.get_tensor_model_parallel_group(),
        cp=parallel_state.get_context_parallel_group(),
    )
    mixer = MambaMixer(
        config, submodules, d_model=HIDDEN, d_conv=KERNEL, chunk_size=CHUNK, pg_collection=groups
    )
    return mixer.to(device)


def _load_hf_weights(megatron, hf) -> None:
    """Same layouts at TP=1: in_proj [z, xBC, dt], conv over xBC, per-head A_log/D/dt_bias."""
    with torch.no_grad():
        megatron.in_proj.weight.copy_(hf.in_proj.weight)
        megatron.conv1d_weight.copy_(hf.conv1d.weight)
        megatron.conv1d_bias.copy_(hf.conv1d.bias)
        megatron.A_log.copy_(hf.A_log)
        megatron.D.copy_(hf.D)
        megatron.dt_bias.copy_(hf.dt_bias)
        megatron.norm.weight.copy_(hf.norm.weight)
        megatron.out_proj.weight.copy_(hf.out_proj.weight)


@pytest.mark.parametrize("seq_len", [12, 150])
def test_mamba_mixer_runs_without_mamba_ssm_as_transformers_does(
    mcore_device: str, seq_len: int
) -> None:
    from megatron.core.ssm.mamba_mixer import HAVE_MAMBA_SSM

    if HAVE_MAMBA_SSM:
        pytest.skip("mamba-ssm is installed: this checks the path without it")
    hf = _hf_mixer()
    megatron = _megatron_mixer(mcore_device)
    assert not megatron.use_mem_eff_path
    _load_hf_weights(megatron, hf)

    x = torch.randn(BATCH, seq_len, HIDDEN, generator=torch.Generator().manual_seed(1))
    x_hf = x.clone().requires_grad_(True)
    x_mc = x.transpose(0, 1).contiguous().to(mcore_device).requires_grad_(True)  # [s, b, h]
    out_hf = hf.torch_forward(x_hf)
    out_mc, _ = megatron(x_mc)
    torch.testing.assert_close(out_mc.transpose(0, 1).cpu(), out_hf.detach(), rtol=1e-4, atol=1e-5)
    out_hf.pow(2).sum().backward()
    out_mc.pow(2).sum().backward()
    assert x_mc.grad is not None and x_hf.grad is not None
    torch.testing.assert_close(x_mc.grad.transpose(0, 1).cpu(), x_hf.grad, rtol=1e-4, atol=1e-5)
    assert megatron.A_log.grad is not None and hf.A_log.grad is not None
    torch.testing.assert_close(megatron.A_log.grad.cpu(), hf.A_log.grad, rtol=1e-4, atol=1e-5)
