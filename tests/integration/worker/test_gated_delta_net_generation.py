"""Generation on models with gated delta net layers (Qwen3.5, Qwen3-Next through Bridge, on the
patched megatron-core): the default backend decodes through the layers' conv and recurrent
state (`state_sampler`, on the Megatron-LM patch gated-delta-net-static-inference). The oracle
is `transformers`: its greedy `generate` on the same checkpoint, which carries the same states
from token to token, gives the same tokens. The Qwen3-Next prompt (70 tokens) spans two of the
chunked rule's 64-token chunks, so the prefill's final state crosses a chunk boundary.

The worker side runs in a child process: it initialises torch.distributed and megatron-core's
parallel state, which other tests of the session may hold already.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_matrix import checks, families

from tests.support.model_checks import child_run

NEW_TOKENS = 6

pytestmark = pytest.mark.cpu_only(reason="builds the tiny checkpoint on the CPU worker path")

# argv: port, checkpoint, vocab, output file, new tokens, prompt length. Greedy tokens of the
# default backend to the file; the child fails unless that backend is the static cache.
GREEDY_TOKENS = """
import os, sys
from pathlib import Path
import torch
import torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
from model_matrix import checks
from mcore_grpo.worker.generation import generate, resolve_backend
from mcore_grpo.worker.sampling import SamplingParams
vocab = int(sys.argv[3])
prompts = checks.tokens(vocab).repeat(1, 6)[:, : int(sys.argv[6])]
params = SamplingParams(max_new_tokens=int(sys.argv[5]), greedy=True)
with checks.imported_model(Path(sys.argv[2]), 1, 1, vocab) as (_, gpt):
    backend, why = resolve_backend(gpt, params)
    assert backend == "static_cache" and "recurrent state" in why, (backend, why)
    out = generate(gpt, prompts, torch.ones_like(prompts), params, vocab)
torch.save(out.output_ids.cpu(), sys.argv[4])
"""


@pytest.mark.parametrize(
    ("arch", "prompt_len"), [("Qwen3_5ForCausalLM", 12), ("Qwen3NextForCausalLM", 70)]
)
def test_greedy_tokens_equal_transformers_generate(
    tmp_path: Path, arch: str, prompt_len: int
) -> None:
    from transformers import AutoModelForCausalLM

    checkpoint = tmp_path / arch
    families.write_checkpoint(checkpoint, arch)
    hf = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    vocab = hf.config.vocab_size
    prompts = checks.tokens(vocab).repeat(1, 6)[:, :prompt_len]
    expected = hf.generate(
        prompts, max_new_tokens=NEW_TOKENS, do_sample=False, min_new_tokens=NEW_TOKENS
    )

    out_file = tmp_path / "tokens.pt"
    child_run(
        GREEDY_TOKENS, str(checkpoint), str(vocab), str(out_file), str(NEW_TOKENS), str(prompt_len)
    )
    assert torch.equal(torch.load(out_file), expected)
