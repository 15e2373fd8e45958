"""Tripwire for patches/Megatron-LM/hybrid-padding-mask-sequence-parallel.patch.

megatron-core's GPTModel splits the MoE padding mask over the tensor-parallel ranks under
sequence parallelism, as it splits the hidden states; its HybridModel passed the whole mask
on, so the router of each rank's MoE layers got a mask twice as long as its tokens and failed
("The size of tensor a (36) must match the size of tensor b (18)", router.py `routing`).
NemotronH's MoE layers could not train at TP > 1 with the worker's padding mask at all,
whole rows or shared. With the patch the model matrix's tiny NemotronH (Mamba, attention and
MoE layers) trains at TP=2 with sequence parallelism on left-padded rows of unequal lengths,
with the logprobs of TP=1.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.support.python_process import run_ranks

# Each rank: `python -c` forked warm (tests/support/python_process.py); argv PORT RANK ...
WORKER = """
import sys
from tests.patches.megatron_lm._hybrid_padding_mask_worker import main
main(int(sys.argv[2]), 2, int(sys.argv[1]), sys.argv[3], sys.argv[4])
"""


@pytest.mark.timeout(900)
def test_hybrid_moe_trains_at_tp2_with_sequence_parallelism(tmp_path: Path) -> None:
    from model_matrix import families

    checkpoint = tmp_path / "nemotron-h"
    families.write_checkpoint(checkpoint, "NemotronHForCausalLM")
    result = tmp_path / "result.pt"
    run_ranks(WORKER, 2, str(checkpoint), str(result))
    figures = torch.load(result)
    assert figures["logprobs"] <= 1e-5, figures
