"""Generation through the recurrent state at TP=2: a Mamba hybrid (NemotronH: Mamba-2,
attention, MoE and MLP layers) and a gated delta net model (Qwen3.5), each split over two gloo
ranks, decode left-padded prompts of different lengths with the default backend (the static
cache through each layer's state, `state_sampler`). Under TP the Mamba groups and the gated
delta net heads are split across ranks, and so is each layer's state. The oracle is
`transformers`' greedy `generate` of each prompt alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_matrix import checks, families

from tests.support.model_checks import LEFT_PADDED_PROMPTS, without_backend_vars
from tests.support.python_process import run_ranks

NEW_TOKENS = 6
LENGTHS = (12, 7)

pytestmark = pytest.mark.cpu_only(reason="builds the tiny checkpoints on the CPU worker path")

# argv: port, rank, checkpoint, vocab, output file, new tokens, lengths. Rank 0 saves the
# greedy tokens and the backend that ran.
RANK = (
    """
import os, sys
from pathlib import Path
import torch
import torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
rank = int(sys.argv[2])
dist.init_process_group("gloo", rank=rank, world_size=2)
from model_matrix import checks
from mcore_grpo.worker.generation import generate, resolve_backend
from mcore_grpo.worker.sampling import SamplingParams
vocab = int(sys.argv[4])
lengths = [int(n) for n in sys.argv[7].split(",")]
"""
    + LEFT_PADDED_PROMPTS
    + """
params = SamplingParams(max_new_tokens=int(sys.argv[6]), greedy=True)
with checks.imported_model(Path(sys.argv[3]), 2, 1, vocab) as (_, gpt):
    backend, _ = resolve_backend(gpt, params)
    out = generate(gpt, prompts, mask, params, vocab)
if rank == 0:
    torch.save({"backend": backend, "tokens": out.output_ids.cpu()}, sys.argv[5])
dist.destroy_process_group()
"""
)


@pytest.mark.parametrize("arch", ["NemotronHForCausalLM", "Qwen3_5ForCausalLM"])
def test_tp2_tokens_through_the_state_equal_transformers(tmp_path: Path, arch: str) -> None:
    from transformers import AutoModelForCausalLM

    checkpoint = tmp_path / arch
    families.write_checkpoint(checkpoint, arch)
    hf = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    vocab = hf.config.vocab_size
    out_file = tmp_path / "out.pt"
    args = (
        str(checkpoint),
        str(vocab),
        str(out_file),
        str(NEW_TOKENS),
        ",".join(map(str, LENGTHS)),
    )
    # Each rank starts without the NVTE attention-backend variables that an earlier test's
    # Bridge provider may have set in this process.
    run_ranks(without_backend_vars(RANK), 2, *args, timeout=600)
    got = torch.load(out_file)
    assert got["backend"] == "static_cache"
    ids = checks.tokens(vocab)
    width = max(LENGTHS)
    for row, n in enumerate(LENGTHS):
        expected = hf.generate(
            ids[row : row + 1, :n],
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            min_new_tokens=NEW_TOKENS,
        )
        assert torch.equal(got["tokens"][row, width - n :], expected[0]), row
