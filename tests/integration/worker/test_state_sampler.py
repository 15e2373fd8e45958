"""`state_sampler.generate_through_state`: its input checks, and one prefill per distinct prompt
against every row prefilled (its tokens are tested against `transformers` in
test_recurrent_layers_padding.py and test_gated_delta_net_generation.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mcore_grpo.worker.sampling import SamplingParams
from mcore_grpo.worker.state_sampler import generate_through_state

from tests.support.model_checks import child_run


def test_a_prompt_row_without_a_real_token_is_refused_by_its_row_number() -> None:
    ids = torch.tensor([[5, 6, 7], [0, 0, 0]])
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])
    model = torch.nn.Linear(1, 1)  # never reached: the check comes before any forward
    with pytest.raises(ValueError, match="prompt row 1 has no real token"):
        generate_through_state(model, ids, mask, SamplingParams(), vocab_size=8)


# argv: port, checkpoint, vocab, output file. Generates from 6 rows, 3 left-padded prompts of
# unequal lengths each twice (not adjacent), sampled at temperature 1 from one seeded generator,
# once prefilling each distinct prompt and once every row; saves both outputs.
SHARED_AND_UNSHARED = """
import os, sys
from pathlib import Path
import torch
import torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
from model_matrix import checks
from mcore_grpo.worker.sampling import SamplingParams
from mcore_grpo.worker.state_sampler import generate_through_state
vocab = int(sys.argv[3])
ids = torch.randint(1, vocab, (3, 9), generator=torch.Generator().manual_seed(3))
mask = torch.ones_like(ids)
for row, pads in enumerate((0, 3, 5)):
    ids[row, :pads], mask[row, :pads] = 0, 0
order = torch.tensor([0, 1, 2, 0, 1, 2])
ids, mask = ids[order], mask[order]
params = SamplingParams(max_new_tokens=6, temperature=1.0)
outputs = {}
with checks.imported_model(Path(sys.argv[2]), 1, 1, vocab) as (_, gpt):
    rows = []
    gpt.register_forward_pre_hook(lambda module, args: rows.append(args[0].shape[0]))
    for share in (True, False):
        rows.clear()
        generator = torch.Generator().manual_seed(7)
        out = generate_through_state(gpt, ids, mask, params, vocab, generator, share_prefill=share)
        outputs[share] = {k: v.cpu() for k, v in vars(out).items()}
        outputs[share]["prefill_rows"] = rows[0]
torch.save(outputs, sys.argv[4])
"""


@pytest.mark.cpu_only(reason="builds the tiny checkpoint on the CPU worker path")
@pytest.mark.parametrize("arch", ["NemotronHForCausalLM", "Qwen3_5ForCausalLM"])
def test_one_prefill_per_prompt_samples_as_every_row_prefilled(tmp_path: Path, arch: str) -> None:
    """A GRPO group's rows share their prompt's prefill (its Mamba or gated delta net states
    and its attention KV cache copied to each row): the same tokens from the same draws, and
    logprobs within 1e-5, as prefilling every row."""
    from model_matrix import families

    checkpoint = tmp_path / arch
    families.write_checkpoint(checkpoint, arch)
    out_file = tmp_path / "outputs.pt"

    child_run(
        SHARED_AND_UNSHARED,
        str(checkpoint),
        str(families.TINY_SIZES["vocab_size"]),
        str(out_file),
    )

    outputs = torch.load(out_file)
    shared, unshared = outputs[True], outputs[False]
    for name in ("output_ids", "attention_mask", "generated_mask", "generation_lengths"):
        assert torch.equal(shared[name], unshared[name]), name
    assert float((shared["logprobs"] - unshared["logprobs"]).abs().max()) <= 1e-5
    assert int(shared["generation_lengths"].min()) > 0
    assert (shared["prefill_rows"], unshared["prefill_rows"]) == (3, 6)
