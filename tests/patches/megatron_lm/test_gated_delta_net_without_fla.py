"""Tripwire for patches/Megatron-LM/gated-delta-net-without-fla.patch.

megatron-core's `GatedDeltaNet` (Qwen3-Next's and Qwen3.5's linear-attention layers) refused
to be built without flash-linear-attention (``ImportError: FLA is not installed``), although
it carries torch-native paths for its causal conv1d and chunked gated delta rule (used in
deterministic mode); only FLA's L2 norm had none. FLA's kernels are Triton: no CPU.

With the patch, a missing FLA selects the torch-native paths, with a torch L2 norm. The
oracle is `transformers`' own Qwen3-Next layer (`Qwen3NextGatedDeltaNet`, which falls back
to its torch kernels without FLA or causal-conv1d) with the same weights: outputs and input
gradients within fp32 tolerance, at a sequence shorter than one chunk (64) and at one
spanning three chunks.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

HIDDEN, KEY_HEADS, VALUE_HEADS, KEY_DIM, VALUE_DIM, KERNEL, BATCH = 32, 2, 4, 8, 8, 4, 2


def _hf_layer():
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    config = Qwen3NextConfig(
        hidden_size=HIDDEN,
        linear_num_key_heads=KEY_HEADS,
        linear_num_value_heads=VALUE_HEADS,
        linear_key_head_dim=KEY_DIM,
        linear_value_head_dim=VALUE_DIM,
        linear_conv_kernel_dim=KERNEL,
        hidden_act="silu",
        rms_norm_eps=1e-6,
    )
    torch.manual_seed(0)
    layer = Qwen3NextGatedDeltaNet(config, layer_idx=0).float()
    with torch.no_grad():  # away from the init values, so every parameter matters
        for param in layer.parameters():
            param.add_(0.1 * torch.randn_like(param))
    return layer


def _megatron_layer(device: str):
    from megatron.core import parallel_state
    from megatron.core.models.backends import LocalSpecProvider
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet, GatedDeltaNetSubmodules
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    config = TransformerConfig(
        num_layers=1,
        hidden_size=HIDDEN,
        num_attention_heads=KEY_HEADS,
        normalization="RMSNorm",
        layernorm_epsilon=1e-6,
        activation_func=F.silu,
        use_cpu_initialization=True,
        linear_conv_kernel_dim=KERNEL,
        linear_key_head_dim=KEY_DIM,
        linear_value_head_dim=VALUE_DIM,
        linear_num_key_heads=KEY_HEADS,
        linear_num_value_heads=VALUE_HEADS,
        experimental_attention_variant="gdn",
        linear_attention_freq=[1],
    )
    backend = LocalSpecProvider()
    submodules = GatedDeltaNetSubmodules(  # the local spec's modules, norm included
        in_proj=backend.column_parallel_linear(),
        out_norm=WrappedTorchNorm,
        out_proj=backend.row_parallel_linear(),
    )
    groups = ProcessGroupCollection(
        tp=parallel_state.get_tensor_model_parallel_group(),
        cp=parallel_state.get_context_parallel_group(),
    )
    return GatedDeltaNet(config, submodules, layer_number=1, pg_collection=groups).to(device)


def _load_hf_weights(megatron, hf) -> None:
    """HF's per-key-head [q k v z] / [b a] groups -> megatron's [q k v z beta alpha] sections."""
    ratio = VALUE_HEADS // KEY_HEADS
    qkvz = hf.in_proj_qkvz.weight.view(KEY_HEADS, 2 * KEY_DIM + 2 * ratio * VALUE_DIM, HIDDEN)
    q, k, v, z = qkvz.split([KEY_DIM, KEY_DIM, ratio * VALUE_DIM, ratio * VALUE_DIM], dim=1)
    b, a = hf.in_proj_ba.weight.view(KEY_HEADS, 2 * ratio, HIDDEN).split([ratio, ratio], dim=1)
    in_proj = torch.cat([t.reshape(-1, HIDDEN) for t in (q, k, v, z, b, a)])
    with torch.no_grad():
        megatron.in_proj.weight.copy_(in_proj)
        megatron.conv1d.weight.copy_(hf.conv1d.weight)
        megatron.A_log.copy_(hf.A_log)
        megatron.dt_bias.copy_(hf.dt_bias)
        megatron.out_norm.weight.copy_(hf.norm.weight)
        megatron.out_proj.weight.copy_(hf.out_proj.weight)


@pytest.mark.parametrize("seq_len", [12, 150])
def test_gated_delta_net_runs_without_fla_as_transformers_does(
    mcore_device: str, seq_len: int
) -> None:
    from megatron.core.ssm.gated_delta_net import HAVE_FLA, torch_chunk_gated_delta_rule

    if HAVE_FLA:
        pytest.skip("flash-linear-attention is installed: this checks the path without it")
    hf = _hf_layer()
    megatron = _megatron_layer(mcore_device)
    assert megatron.gated_delta_rule is torch_chunk_gated_delta_rule
    _load_hf_weights(megatron, hf)

    x = torch.randn(BATCH, seq_len, HIDDEN, generator=torch.Generator().manual_seed(1))
    x_hf = x.clone().requires_grad_(True)
    x_mc = x.transpose(0, 1).contiguous().to(mcore_device).requires_grad_(True)  # [s, b, h]
    out_hf = hf(x_hf)
    out_mc, _ = megatron(x_mc, None)
    torch.testing.assert_close(out_mc.transpose(0, 1).cpu(), out_hf.detach(), rtol=1e-4, atol=1e-5)
    out_hf.pow(2).sum().backward()
    out_mc.pow(2).sum().backward()
    assert x_mc.grad is not None and x_hf.grad is not None
    torch.testing.assert_close(x_mc.grad.transpose(0, 1).cpu(), x_hf.grad, rtol=1e-4, atol=1e-5)
    assert megatron.A_log.grad is not None and hf.A_log.grad is not None
    torch.testing.assert_close(megatron.A_log.grad.cpu(), hf.A_log.grad, rtol=1e-4, atol=1e-5)
