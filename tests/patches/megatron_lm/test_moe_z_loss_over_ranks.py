"""Tripwire for patches/Megatron-LM/moe-z-loss-over-ranks.patch.

Under tensor parallelism with sequence parallelism each TP rank routes its own slice of the
columns, computes the router z-loss as the mean over its slice, and the ranks' z-losses are
summed (each scaled by 1/TP). Where padding (or a shared prefix's token counts) leaves the
ranks unequal shares of real tokens, that is the mean of the ranks' means, not the mean over
the tokens: the z-loss, its gradient and `moe/z_loss` depended on where the row was cut.
Shared-prefix rows and whole rows cut their tokens differently, so on the model matrix's tiny
EXAONE-MoE (z-loss coefficient 1e-3) at TP=2 their router metrics differed by 5.9e-4 relative.
With the patch each rank divides by the TP ranks' mean count: logprobs, every gradient (reduced
over TP as megatron-core's finalize does) and the router metrics those of whole rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.support.python_process import run_ranks

# Each rank: `python -c` forked warm (tests/support/python_process.py); argv PORT RANK ...
WORKER = """
import sys
from tests.patches.megatron_lm._z_loss_tp_worker import main
main(int(sys.argv[2]), 2, int(sys.argv[1]), sys.argv[3], sys.argv[4])
"""


@pytest.mark.timeout(900)
def test_moe_z_loss_at_tp2_with_shared_prefix_equals_whole_rows(tmp_path: Path) -> None:
    from model_matrix import families

    checkpoint = tmp_path / "exaone-moe"
    families.write_checkpoint(checkpoint, "ExaoneMoeForCausalLM")
    result = tmp_path / "result.pt"
    run_ranks(WORKER, 2, str(checkpoint), str(result))
    figures = torch.load(result)
    assert max(figures["logprobs"], figures["gradients"], figures["router"]) <= 1e-5, figures
