"""Tripwire for patches/Megatron-LM/sparse-attention-local-backend.patch.

GLM-5 and DeepSeek-V3.2 attend through megatron-core's sparse attention (DSA): absorbed MLA
whose keys an indexer picks, top-k per query. Its indexer projects with duplicated (not
TP-split) linears, `backend.linear()`, which only the Transformer Engine backend had: without
TE no DSA layer could be built (`'LocalSpecProvider' object has no attribute 'linear'`, or one
refusing line).

With the patch the local backend's `linear()` is megatron-core's local duplicated linear and
the DSA layer builds and trains without TE. The oracle is megatron-core's dense MLA layer
(`MLASelfAttention`, the local GPT spec, which the model matrix checks against `transformers`
for DeepSeek-V3): with the same weights and top-k covering the sequence, sparse attention
selects every key and must give the dense layer's output.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

HIDDEN, HEADS, SEQ, BATCH = 32, 4, 6, 2


def _config(topk: int) -> Any:
    from megatron.core.transformer.transformer_config import MLATransformerConfig

    return MLATransformerConfig(
        num_layers=1,
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        ffn_hidden_size=64,
        normalization="RMSNorm",
        activation_func=F.silu,
        gated_linear_unit=True,
        add_bias_linear=False,
        qk_layernorm=True,
        use_cpu_initialization=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        masked_softmax_fusion=False,
        transformer_impl="local",
        multi_latent_attention=True,
        q_lora_rank=16,
        kv_lora_rank=16,
        qk_head_dim=8,
        qk_pos_emb_head_dim=8,
        v_head_dim=8,
        rope_type="rope",
        rotary_base=10000,
        dsa_indexer_n_heads=2,
        dsa_indexer_head_dim=8,
        dsa_indexer_topk=topk,
        dsa_indexer_loss_coeff=0.0,
        dsa_indexer_rotate_activation=False,  # GLM-5's; the Hadamard kernel is CUDA and bf16 only
        experimental_attention_variant="dsa",
    )


def _blocks(topk: int, device: str) -> tuple[Any, Any]:
    """The DSA block on the local backend and the dense local MLA block, same weights."""
    import copy

    from megatron.core.models.gpt.experimental_attention_variant_module_specs import (
        get_transformer_block_with_experimental_attention_variant_spec,
    )
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer.transformer_block import TransformerBlock

    config = _config(topk)
    sparse = TransformerBlock(
        config, get_transformer_block_with_experimental_attention_variant_spec(config)
    )
    dense_config = copy.copy(config)
    dense_config.experimental_attention_variant = None
    dense = TransformerBlock(
        dense_config, get_gpt_decoder_block_spec(dense_config, use_transformer_engine=False)
    )
    missing, unexpected = dense.load_state_dict(sparse.state_dict(), strict=False)
    assert not missing, missing
    assert all(".indexer." in key for key in unexpected), unexpected
    return sparse.to(device), dense.to(device)


def _inputs(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    hidden = torch.randn(SEQ, BATCH, HIDDEN, generator=torch.Generator().manual_seed(0))
    mask = torch.triu(torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool), diagonal=1)
    return hidden.to(device), mask.to(device)


def test_sparse_attention_builds_on_the_local_backend(mcore_device: str) -> None:
    from megatron.core.post_training.modelopt.layers import Linear

    sparse, _ = _blocks(SEQ, mcore_device)
    attention = sparse.layers[0].self_attention
    indexer = attention.core_attention.indexer
    for linear in (indexer.linear_wq_b, indexer.linear_wk, indexer.linear_weights_proj):
        assert isinstance(linear, Linear)
        assert linear.parallel_mode == "duplicated"


def test_sparse_attention_over_every_key_is_dense_mla(mcore_device: str) -> None:
    sparse, dense = _blocks(SEQ, mcore_device)
    sparse.eval()
    dense.eval()
    hidden, mask = _inputs(mcore_device)
    with torch.no_grad():
        torch.testing.assert_close(sparse(hidden, mask), dense(hidden, mask))


def test_sparse_attention_selects_and_trains_on_the_local_backend(mcore_device: str) -> None:
    sparse, dense = _blocks(2, mcore_device)
    hidden, mask = _inputs(mcore_device)
    out = sparse(hidden, mask)
    with torch.no_grad():
        reference = dense(hidden, mask)
    # The first two queries see at most two keys either way; later ones lose keys.
    torch.testing.assert_close(out[:2], reference[:2])
    assert (out[2:] - reference[2:]).abs().max() > 1e-3
    out.square().mean().backward()
    for name, param in sparse.named_parameters():
        if ".indexer." not in name:
            assert param.grad is not None and param.grad.abs().max() > 0, name
