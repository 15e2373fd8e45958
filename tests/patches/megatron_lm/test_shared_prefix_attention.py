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

import pytest

from tests.support.model_checks import child_figure

SCRIPT = """
import os, sys
from pathlib import Path
import torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
from megatron.core.transformer.shared_prefix_attention import SharedPrefixParams, segments_of_groups
from mcore_grpo.models import checks, families
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
    from mcore_grpo.models import families

    checkpoint = tmp_path / "llama"
    families.write_checkpoint(checkpoint, "LlamaForCausalLM")
    diff = child_figure(SCRIPT, str(checkpoint))
    assert diff <= 1e-5, f"max |shared row - own row| logits over the completions = {diff}"
