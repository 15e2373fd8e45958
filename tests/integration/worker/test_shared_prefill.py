"""One prefill per distinct prompt (`shared_prefill.py`): a GRPO batch's repeated prompts are
prefilled once and their KV cache copied to the rows that repeat them.

The oracle is the same sampler prefilling every row (`share_prefill=False`, the path before
this module) and the recompute sampler (no cache at all): same tokens from the same
generator, logprobs within 1e-5 at the logit scale, on a rope model with left-padded prompts
of unequal lengths whose repeats are not adjacent in the batch.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from mcore_grpo.worker.cpu import cpu_device
from mcore_grpo.worker.recompute_sampler import generate_recompute
from mcore_grpo.worker.sampling import GenerationOutput, SamplingParams
from mcore_grpo.worker.shared_prefill import PromptGroups, distinct_prompts, expand_cache
from mcore_grpo.worker.static_cache_sampler import generate_static_cache

from tests.integration.worker.harness import GREEDY, prompts, seeded
from tests.integration.worker.harness import REAL_VOCAB as REAL
from tests.integration.worker.harness import assert_same_generation as _assert_same
from tests.support.device import TEST_DEVICE


def _groups_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """12 rows: 3 left-padded prompts of lengths 7, 5 and 3, each 4 times, interleaved
    (rows 0, 3, 6, 9 share one), so a group's rows are not adjacent."""
    ids, mask = prompts(rows=3, length=7, seed=4, vocab=REAL)
    order = torch.arange(12) % 3
    return ids[order], mask[order]


def _sample(
    model: torch.nn.Module,
    ids: torch.Tensor,
    mask: torch.Tensor,
    share_prefill: bool,
    temperature: float = 1.0,
    seed: int = 7,
) -> GenerationOutput:
    params = SamplingParams(temperature=temperature, max_new_tokens=12)
    with cpu_device(TEST_DEVICE):
        return generate_static_cache(
            model,
            ids.to(TEST_DEVICE),
            mask.to(TEST_DEVICE),
            params,
            REAL,
            seeded(seed),
            share_prefill=share_prefill,
        )


def test_distinct_prompts_groups_by_real_tokens_and_mask() -> None:
    ids = torch.tensor([[0, 5, 6], [9, 5, 6], [0, 5, 6], [5, 5, 6], [4, 4, 4]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1]])
    groups = distinct_prompts(ids, mask)
    inverse = groups.inverse.tolist()
    # Rows 0-2 differ only in a pad column's id: one prompt. Row 3 has the same ids as
    # row 0's real ones plus a real token where row 0 pads: another prompt.
    assert inverse[0] == inverse[1] == inverse[2]
    assert len({inverse[0], inverse[3], inverse[4]}) == 3
    assert groups.shared and groups.first.numel() == 3
    assert torch.equal(groups.inverse[groups.first], torch.arange(3))
    assert groups.first[groups.inverse[1]] == 0  # the first occurrence
    assert not distinct_prompts(ids[3:], mask[3:]).shared
    with pytest.raises(ValueError, match=r"must both be \[batch, prompt_len\]"):
        distinct_prompts(ids, mask[:, :2])


@pytest.mark.parametrize("temperature", [1.0, GREEDY])
def test_shared_prefill_samples_as_a_prefill_of_every_row(
    rope_model: torch.nn.Module, temperature: float
) -> None:
    ids, mask = _groups_batch()
    shared = _sample(rope_model, ids, mask, True, temperature)
    _assert_same(shared, _sample(rope_model, ids, mask, False, temperature), temperature)
    params = SamplingParams(temperature=temperature, max_new_tokens=12)
    with cpu_device(TEST_DEVICE):
        recompute = generate_recompute(
            rope_model, ids.to(TEST_DEVICE), mask.to(TEST_DEVICE), params, REAL, seeded(7)
        )
    _assert_same(shared, recompute, temperature)
    # Not vacuous: a group's rows drew different completions from one shared cache.
    group = shared.output_ids[0::3, 7:]
    assert len({tuple(row.tolist()) for row in group}) > 1 or temperature == GREEDY


def test_the_prefill_runs_once_per_distinct_prompt(rope_model: torch.nn.Module) -> None:
    ids, mask = _groups_batch()
    widths: list[tuple[int, ...]] = []
    hook = rope_model.register_forward_pre_hook(
        lambda _module, args: widths.append(tuple(args[0].shape))
    )
    try:
        _sample(rope_model, ids, mask, True)
        shared_prefill = widths[0]
        widths.clear()
        _sample(rope_model, ids, mask, False)
        full_prefill = widths[0]
    finally:
        hook.remove()
    assert shared_prefill == (3, 7) and full_prefill == (12, 7)


def test_expand_cache_refuses_what_is_not_a_kv_cache() -> None:
    groups = PromptGroups(first=torch.tensor([0]), inverse=torch.tensor([0, 0]))

    context = SimpleNamespace(
        key_value_memory_dict={1: (torch.zeros(4, 2, 3), torch.zeros(4, 2, 3))}
    )
    context.key_value_memory_dict[1][0][:, 0] = 1.0
    expand_cache(context, groups, length=3)
    key = context.key_value_memory_dict[1][0]
    assert torch.equal(key[:3, 1], torch.ones(3, 3)) and float(key[3, 1].sum()) == 0.0
    other = SimpleNamespace(key_value_memory_dict={"image_tokens_count": torch.zeros(2)})
    with pytest.raises(ValueError, match=r"'image_tokens_count' is not a \[seq, batch"):
        expand_cache(other, groups, length=3)
