"""One prefill per distinct prompt (`shared_prefill.py`): a GRPO batch's repeated prompts are
prefilled once and their KV cache copied to the rows that repeat them.

The oracle is the same sampler prefilling every row (`share_prefill=False`, the path before
this module) and the recompute sampler (no cache at all): same tokens from the same
generator, logprobs within 1e-5 at the logit scale, on a rope model with left-padded prompts
of unequal lengths whose repeats are not adjacent in the batch.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

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
    """12 rows: 3 left-padded prompts of unequal lengths (at most 7), each 4 times, interleaved
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


def _attention_calls(model: torch.nn.Module, run: Any) -> list[tuple[Any, dict[str, Any]]]:
    """(attention mask, kwargs) of every core-attention call while `run()` runs."""
    seen: list[tuple[Any, dict[str, Any]]] = []

    def record(_module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        seen.append((args[3] if len(args) > 3 else kwargs.get("attention_mask"), kwargs))

    hooks = [
        m.register_forward_pre_hook(record, with_kwargs=True)
        for m in model.modules()
        if type(m).__name__.endswith("DotProductAttention")
    ]
    try:
        run()
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def test_the_prefill_attends_by_segments_without_a_mask(rope_model: torch.nn.Module) -> None:
    """The prefill's attention gets one segment per distinct prompt, from its first real token,
    and no mask; the decode steps get only a [B, 1, 1, S] key-padding mask."""
    ids, mask = _groups_batch()
    calls = _attention_calls(rope_model, lambda: _sample(rope_model, ids, mask, True))
    layers = sum(type(m).__name__.endswith("DotProductAttention") for m in rope_model.modules())
    prefill, decode = calls[:layers], calls[layers:]
    assert all(m is None for m, _ in prefill)
    segments = prefill[0][1]["packed_seq_params"].segments
    assert [s.row for s in segments] == [0, 1, 2]  # the distinct prompts only
    assert sorted(s.length for s in segments) == sorted(mask[:3].sum(dim=1).tolist())
    assert all(s.start + s.length == 7 for s in segments)  # left-padded: from the first real
    assert decode and all(m.shape[-2] == 1 for m, _ in decode)


def test_the_prefill_by_segments_samples_as_the_masked_prefill(
    rope_model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The masked prefill (what a model whose attention takes no segments still gets) is the
    oracle: the same tokens and logprobs within 1e-5."""
    import mcore_grpo.worker.static_cache_sampler as sampler

    ids, mask = _groups_batch()
    by_segments = _sample(rope_model, ids, mask, True)
    monkeypatch.setattr(sampler, "prefill_segments_reason", lambda _model: "forced")
    masked = _sample(rope_model, ids, mask, True)
    _assert_same(by_segments, masked, 1.0)
