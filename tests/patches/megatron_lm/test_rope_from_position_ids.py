"""Tripwire for patches/Megatron-LM/rope-from-position-ids.patch.

Shared-prefix GRPO (issue 57) puts a group's prompt once in a row and its completions after it,
[prompt | c_1 | c_2 | ...], each completion masked from the others and given the positions that
follow the prompt. megatron-core's GPTModel rotates queries and keys by their index in the row
and never reads `position_ids` under standard RoPE, so every completion after the first sits
too far from the prompt and scores differently from its own row. With the patch and
`config.rope_from_position_ids` each completion's logits are those of [prompt | c_i]. Checked on
the model matrix's tiny Llama built by Bridge, through the worker's forward (`model_logits`).
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
from model_matrix import checks, families
from mcore_grpo.worker.forward import model_logits
vocab = families.TINY_SIZES["vocab_size"]
prompt, completion, samples = 6, 4, 3
ids = torch.randint(0, vocab, (1, prompt + samples * completion),
                    generator=torch.Generator().manual_seed(3))
size = ids.shape[1]
positions = torch.cat([torch.arange(prompt)]
                      + [torch.arange(prompt, prompt + completion)] * samples)[None, :]
mask = torch.ones(size, size, dtype=torch.bool).triu(1)
for i in range(samples):
    start = prompt + i * completion
    mask[start : start + completion, prompt:start] = True
with checks.imported_model(Path(sys.argv[2]), 1, 1, vocab) as (_, gpt):
    gpt.config.rope_from_position_ids = True
    shared = model_logits(gpt, ids, positions, mask[None, None])
    worst = 0.0
    for i in range(samples):
        start = prompt + i * completion
        own_ids = torch.cat([ids[:, :prompt], ids[:, start : start + completion]], dim=1)
        causal = torch.ones(prompt + completion, prompt + completion, dtype=torch.bool).triu(1)
        own_positions = torch.arange(prompt + completion)[None, :]
        own = model_logits(gpt, own_ids, own_positions, causal[None, None])[:, prompt:]
        diff = float((shared[:, start : start + completion] - own).abs().max())
        worst = max(worst, diff)
print("DIFF", worst)
"""


@pytest.mark.timeout(600)
def test_completions_after_a_shared_prompt_score_as_in_their_own_rows(tmp_path: Path) -> None:
    from model_matrix import families

    checkpoint = tmp_path / "llama"
    families.write_checkpoint(checkpoint, "LlamaForCausalLM")
    diff = child_figure(SCRIPT, str(checkpoint))
    assert diff <= 1e-5, f"max |shared row - own row| logits over the completions = {diff}"
