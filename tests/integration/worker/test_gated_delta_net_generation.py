"""Generation on a model with gated delta net layers (Qwen3.5 through Bridge, on the patched
megatron-core): the static cache is not offered, because megatron-core's `GatedDeltaNet` keeps no
inference state (its forward raises NotImplementedError with an inference context), so the
default backend falls back to recompute, saying why. The oracle is `transformers`: its greedy
`generate` on the same checkpoint, which carries the layers' conv and recurrent state from
token to token, gives the same tokens.

The worker side runs in a child process: it initialises torch.distributed and megatron-core's
parallel state, which other tests of the session may hold already.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mcore_grpo.models import checks, families

from tests.support.model_checks import child_run

ARCH = "Qwen3_5ForCausalLM"
NEW_TOKENS = 6

pytestmark = pytest.mark.cpu_only(reason="builds the tiny checkpoint on the CPU worker path")

# argv: port, checkpoint, vocab, output file, new tokens. Greedy tokens of the default backend to the file;
# the child fails unless that backend is recompute, for the gated delta net layers.
GREEDY_TOKENS = """
import os, sys
from pathlib import Path
import torch
import torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
from mcore_grpo.models import checks
from mcore_grpo.worker.generation import generate, resolve_backend
from mcore_grpo.worker.sampling import SamplingParams
vocab = int(sys.argv[3])
prompts = checks.tokens(vocab)
params = SamplingParams(max_new_tokens=int(sys.argv[5]), greedy=True)
with checks.imported_model(Path(sys.argv[2]), 1, 1, vocab) as (_, gpt):
    backend, why = resolve_backend(gpt, params)
    assert backend == "recompute" and "gated delta net" in why, (backend, why)
    out = generate(gpt, prompts, torch.ones_like(prompts), params, vocab)
torch.save(out.output_ids.cpu(), sys.argv[4])
"""


def test_greedy_tokens_equal_transformers_generate(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    checkpoint = tmp_path / ARCH
    families.write_checkpoint(checkpoint, ARCH)
    hf = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    vocab = hf.config.vocab_size
    prompts = checks.tokens(vocab)  # 2 x 12 ids
    expected = hf.generate(
        prompts, max_new_tokens=NEW_TOKENS, do_sample=False, min_new_tokens=NEW_TOKENS
    )

    out_file = tmp_path / "tokens.pt"
    child_run(GREEDY_TOKENS, str(checkpoint), str(vocab), str(out_file), str(NEW_TOKENS))
    assert torch.equal(torch.load(out_file), expected)
