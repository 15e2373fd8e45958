"""Left-padded rows on models with recurrent layers: Mamba-2 (NemotronH, Falcon-H1) and gated
delta net (Qwen3.5), through Bridge on the patched megatron-core.

megatron-core's Mamba and gated delta net layers take no padding mask, so a left pad entered
their state and changed every later output of its row (0.04 and 0.10 in the tiny rows'
logits). The worker forwards rows packed, real tokens left-aligned (`packed_rows`), and the
rows decode through their state with the prompts fed unpadded (`state_sampler`). The oracle is
`transformers`: its logits of each prompt alone, unpadded, and its greedy `generate` of each
prompt alone; the worker sees the prompts of different lengths as one left-padded batch, and
generates with the default backend and with recompute. A sampled run's logprobs must equal
the training forward's score of the same tokens, and a run where one row meets a stop token
equals recompute's in every output field.

The worker side runs in a child process: it initialises torch.distributed and megatron-core's
parallel state, which other tests of the session may hold already.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_matrix import checks, families

from tests.support.model_checks import LEFT_PADDED_PROMPTS, child_run

NEW_TOKENS = 6
LENGTHS = (12, 7)  # the second prompt is left-padded by 5

pytestmark = pytest.mark.cpu_only(reason="builds the tiny checkpoints on the CPU worker path")

# argv: port, checkpoint, vocab, output file, new tokens, lengths. Saves the worker's logits
# of the left-padded batch, its greedy tokens of the default backend and of recompute, the
# default backend's name, and a sampled run's logprobs with the training forward's score.
PADDED_BATCH = (
    """
import os, sys
from pathlib import Path
import torch
import torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
from model_matrix import checks
from dataclasses import replace
from mcore_grpo.worker.forward import next_token_logprobs
from mcore_grpo.worker.packed_rows import policy_logits
from mcore_grpo.worker.generation import generate, resolve_backend
from mcore_grpo.worker.sampling import SamplingParams
vocab = int(sys.argv[3])
lengths = [int(n) for n in sys.argv[6].split(",")]
"""
    + LEFT_PADDED_PROMPTS
    + """
params = SamplingParams(max_new_tokens=int(sys.argv[5]), greedy=True)
with checks.imported_model(Path(sys.argv[2]), 1, 1, vocab) as (_, gpt):
    logits = policy_logits(gpt, prompts, mask.bool())[..., :vocab]
    backend, _ = resolve_backend(gpt, params)
    out = generate(gpt, prompts, mask, params, vocab)
    recompute = generate(gpt, prompts, mask, replace(params, backend="recompute"), vocab)
    sampled = generate(
        gpt, prompts, mask, replace(params, greedy=False, temperature=0.7), vocab,
        torch.Generator().manual_seed(0),
    )
    scored = next_token_logprobs(
        policy_logits(gpt, sampled.output_ids, sampled.attention_mask.bool()),
        sampled.output_ids, vocab, 0.7,
    )
    # A stop token: the shorter prompt's third greedy token, so that row stops early.
    stop = replace(params, stop_token_ids=(int(out.output_ids[1, width + 2]),))
    stopped = [generate(gpt, prompts, mask, replace(stop, backend=b), vocab)
               for b in ("static_cache", "recompute")]
torch.save({
    "logits": logits, "tokens": out.output_ids.cpu(), "recompute": recompute.output_ids,
    "backend": backend, "sampled_logp": sampled.logprobs[:, 1:],
    "scored_logp": scored * sampled.generated_mask[:, 1:],
    "stopped": [[o.output_ids, o.attention_mask, o.generated_mask, o.logprobs] for o in stopped],
}, sys.argv[4])
"""
)


@pytest.mark.parametrize(
    "arch", ["NemotronHForCausalLM", "Qwen3_5ForCausalLM", "FalconH1ForCausalLM"]
)
def test_left_padded_rows_equal_transformers_on_each_prompt_alone(
    tmp_path: Path, arch: str
) -> None:
    from transformers import AutoModelForCausalLM

    checkpoint = tmp_path / arch
    families.write_checkpoint(checkpoint, arch)
    hf = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    vocab = hf.config.vocab_size
    ids = checks.tokens(vocab)
    out_file = tmp_path / "out.pt"
    child_run(
        PADDED_BATCH,
        str(checkpoint),
        str(vocab),
        str(out_file),
        str(NEW_TOKENS),
        ",".join(map(str, LENGTHS)),
    )
    got = torch.load(out_file)
    assert got["backend"] == "static_cache"  # through the recurrent state
    torch.testing.assert_close(got["sampled_logp"], got["scored_logp"], rtol=1e-4, atol=1e-4)
    assert bool(got["sampled_logp"].ne(0).any())
    cached, recomputed = got["stopped"]
    assert int(cached[2][1].sum()) <= 3  # the row stopped at its stop token
    for ours, reference in zip(cached, recomputed, strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-5)
    width = max(LENGTHS)
    for row, n in enumerate(LENGTHS):
        prompt = ids[row : row + 1, :n]
        with torch.no_grad():
            expected_logits = hf(prompt).logits
        torch.testing.assert_close(
            got["logits"][row : row + 1, width - n :], expected_logits, rtol=1e-4, atol=1e-4
        )
        expected = hf.generate(
            prompt, max_new_tokens=NEW_TOKENS, do_sample=False, min_new_tokens=NEW_TOKENS
        )
        assert torch.equal(got["tokens"][row, width - n :], expected[0]), row
        assert torch.equal(got["recompute"][row, width - n :], expected[0]), row
