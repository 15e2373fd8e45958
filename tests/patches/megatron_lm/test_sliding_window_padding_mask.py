"""Tripwire for patches/Megatron-LM/sliding-window-keeps-padding-mask.patch.

Without Transformer Engine megatron-core's attention softmax (`FusedScaleMaskSoftmax.
forward_torch_softmax`) builds the sliding-window mask and *replaces* the mask it was given with
it. A caller that masks padding (the worker's KV-cache decode passes a key-padding mask at every
step; any caller forwarding left-padded rows with a causal + key-padding mask) then had every
sliding-window layer (Gemma 2/3, EXAONE 4, ...) attend its padding tokens: a padded row's logits
differed from the same row without padding. With the patch the given mask still applies inside
the window. Checked on the model matrix's tiny Gemma 3 (window 8, one sliding and one full
layer) over the dense mask (`tests/support/dense_reference.py`; the worker's own logprob and
training passes drop padding instead): the row left-padded by two tokens must give the
unpadded row's logits.
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
from tests.support.dense_reference import masked_logits
vocab = families.TINY_SIZES["vocab_size"]
ids = checks.tokens(vocab)[:1]
padded = torch.cat([torch.zeros(1, 2, dtype=ids.dtype), ids], dim=1)
valid = torch.ones_like(padded, dtype=torch.bool)
valid[:, :2] = False
with checks.imported_model(Path(sys.argv[2]), 1, 1, vocab) as (_, gpt):
    plain = masked_logits(gpt, ids, torch.ones_like(ids, dtype=torch.bool))
    left = masked_logits(gpt, padded, valid)[:, 2:]
print("DIFF", float((plain - left).abs().max()))
"""


@pytest.mark.timeout(600)
def test_left_padded_row_matches_the_unpadded_row_in_a_sliding_window_model(
    tmp_path: Path,
) -> None:
    from model_matrix import families

    checkpoint = tmp_path / "gemma3"
    families.write_checkpoint(checkpoint, "Gemma3ForCausalLM")
    assert families.tiny_config("Gemma3ForCausalLM").sliding_window == 8  # < 12 + 2 tokens
    diff = child_figure(SCRIPT, str(checkpoint))
    assert diff <= 1e-4, f"max |padded - unpadded| logits on the real tokens = {diff}"
