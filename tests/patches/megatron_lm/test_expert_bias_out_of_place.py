"""Tripwire for patches/Megatron-LM/expert-bias-out-of-place.patch.

megatron-core's expert MLP adds its probability-weighted fc2 bias to fc2's output in place.
Without tensor or expert parallelism that output is the reduction's input returned as-is from a
custom autograd Function, and autograd refuses the in-place add: a model whose local
(SequentialMLP) experts have biases, as GPT-OSS's, could not train at TP=1 / EP=1 (the model
matrix trains MoE rows at EP=2, where the reduction is skipped). With the patch the add is out of
place. Checked with one GRPO step of the worker on the matrix's tiny GPT-OSS at TP=1, EP=1 in a
one-rank child: the loss is finite and the weights move.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.support.model_checks import child_run

GRPO_STEP_EP1 = """
import os, sys
from pathlib import Path
import torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
from model_matrix import checks, families
step = checks.grpo_step(Path(sys.argv[2]), 1, 1, families.TINY_SIZES["vocab_size"])
print("LOSS", step["loss"], "MOVED", step["max_weight_change"])
"""


@pytest.mark.timeout(600)
def test_gpt_oss_trains_without_expert_parallelism(tmp_path: Path) -> None:
    from model_matrix import families

    checkpoint = tmp_path / "gpt-oss"
    families.write_checkpoint(checkpoint, "GptOssForCausalLM")

    out = child_run(GRPO_STEP_EP1, str(checkpoint)).split()
    loss, moved = float(out[out.index("LOSS") + 1]), float(out[out.index("MOVED") + 1])

    assert math.isfinite(loss)
    assert moved > 0
