"""Tripwire for patches/Megatron-LM/shared-prefix-attention.patch.

Shared-prefix GRPO forwards a group as one row, [prompt | c_1 | c_2 | ...], each completion
attending the prompt and, causally, itself. megatron-core had no way to say so but a dense
[s, s] mask (every score computed, no kernel skipping blocks, and none at all under Transformer
Engine). With the patch a `SharedPrefixParams` (segments, each naming the one it continues),
passed as `packed_seq_params`, is the whole mask: each completion's logits are those of its own
row [prompt | c_i]. Checked on the model matrix's tiny Llama built by Bridge (rope, GQA), through
the worker's forward (`model_logits`), with no attention mask at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.model_checks import child_figure

SCRIPT = """
import os, sys
from pathlib import Path
from typing import Any
import torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
from megatron.core.transformer.shared_prefix_attention import SharedPrefixParams, segments_of_groups
from model_matrix import checks, families
from mcore_grpo.worker.forward import model_logits
vocab = families.TINY_SIZES["vocab_size"]
prompt, lengths = 6, [4, 2, 5]
ids = torch.randint(0, vocab, (1, prompt + sum(lengths)),
                    generator=torch.Generator().manual_seed(3))
positions = torch.cat([torch.arange(prompt)]
                      + [torch.arange(prompt, prompt + n) for n in lengths])[None, :]
params = SharedPrefixParams(segments=segments_of_groups([(0, prompt, lengths)]))
with checks.imported_model(Path(sys.argv[2]), 1, 1, vocab) as (_, gpt):
    gpt.config.rope_from_position_ids = True
    shared = model_logits(gpt, ids, positions, None, packed_seq_params=params)
    worst, start = 0.0, prompt
    for length in lengths:
        own_ids = torch.cat([ids[:, :prompt], ids[:, start : start + length]], dim=1)
        causal = torch.ones(prompt + length, prompt + length, dtype=torch.bool).triu(1)
        own_positions = torch.arange(prompt + length)[None, :]
        own = model_logits(gpt, own_ids, own_positions, causal[None, None])[:, prompt:]
        worst = max(worst, float((shared[:, start : start + length] - own).abs().max()))
        start += length
print("DIFF", worst)
"""


@pytest.mark.timeout(600)
def test_completions_score_as_in_their_own_rows_without_a_mask(tmp_path: Path) -> None:
    from model_matrix import families

    checkpoint = tmp_path / "llama"
    families.write_checkpoint(checkpoint, "LlamaForCausalLM")
    diff = child_figure(SCRIPT, str(checkpoint))
    assert diff <= 1e-5, f"max |shared row - own row| logits over the completions = {diff}"


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["local", "transformer_engine"])
def test_on_cuda_each_backend_matches_the_dense_mask(mcore_parallel: None, backend: str) -> None:
    """On a GPU: the local attention (torch SDPA on CUDA) and Transformer Engine's THD route
    (bottom-right causal over each segment's ancestors and itself) against the masked softmax
    over the dense mask the segments describe, bf16, forward and gradients."""
    import torch
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.shared_prefix_attention import (
        SharedPrefixParams,
        segments_of_groups,
    )
    from megatron.core.transformer.transformer_config import TransformerConfig

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA: no GPU on this machine")
    config = TransformerConfig(
        num_layers=1,
        hidden_size=128,
        num_attention_heads=8,
        num_query_groups=2,
        attention_dropout=0.0,
        bf16=True,
        params_dtype=torch.bfloat16,
    )
    build: Any = DotProductAttention
    if backend == "transformer_engine":
        te = pytest.importorskip("megatron.core.extensions.transformer_engine")
        build = te.TEDotProductAttention
    attention = build(
        config=config, layer_number=1, attn_mask_type=AttnMaskType.causal, attention_type="self"
    ).cuda()
    reference = DotProductAttention(
        config=config, layer_number=1, attn_mask_type=AttnMaskType.causal, attention_type="self"
    ).cuda()
    prompt, lengths = 200, [64, 17, 120, 1, 90, 33, 64, 8]
    params = SharedPrefixParams(segments=segments_of_groups([(0, prompt, lengths)]))
    seq = prompt + sum(lengths)
    generator = torch.Generator(device="cuda").manual_seed(0)
    query, key, value = (
        torch.randn(
            seq, 1, h, 16, device="cuda", dtype=torch.bfloat16, generator=generator
        ).requires_grad_()
        for h in (8, 2, 2)
    )
    mask = torch.ones(1, 1, seq, seq, dtype=torch.bool, device="cuda")
    for index, segment in enumerate(params.segments):
        visible = params.ancestor_columns(index)
        for column in range(segment.start, segment.start + segment.length):
            visible = [*visible, column]
            mask[0, 0, column, visible] = False
    got = attention(query, key, value, None, AttnMaskType.causal, packed_seq_params=params)
    want = reference(query, key, value, mask)
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
    weights = torch.randn(got.shape, device="cuda", dtype=got.dtype, generator=generator)
    for a, b in zip(
        torch.autograd.grad(got, (query, key, value), weights),
        torch.autograd.grad(want, (query, key, value), weights),
        strict=True,
    ):
        torch.testing.assert_close(a.float(), b.float(), rtol=5e-2, atol=5e-2)
