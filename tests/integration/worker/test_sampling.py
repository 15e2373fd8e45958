"""`Rollout`'s per-step decode state (key-padding mask, last position), by hand values; the
token draw against its distribution."""

from __future__ import annotations

import pytest
import torch
from mcore_grpo.worker.sampling import Rollout, SamplingParams

PAD, STOP = 0, 9


def test_decode_state_follows_padding_and_stops_column_by_column() -> None:
    # Row 0: a 3-token prompt; row 1: left-padded, 2 real tokens.
    ids = torch.tensor([[5, 6, 7], [PAD, 5, 6]])
    mask = torch.tensor([[1, 1, 1], [0, 1, 1]])
    rollout = Rollout(ids, mask, SamplingParams(max_new_tokens=4, stop_token_ids=(STOP,)))
    assert rollout.key_padding.shape == (2, 1, 1, 7)
    assert rollout.key_padding[:, 0, 0, :3].tolist() == [[False] * 3, [True, False, False]]
    # Row 1 stops at its first sampled token; row 0 goes on.
    rollout.append(torch.tensor([4, STOP]), torch.zeros(2))
    assert rollout.last_position().tolist() == [[3], [2]]  # the sampled tokens' positions
    rollout.append(torch.tensor([3, 4]), torch.zeros(2))
    # Row 1's column after its stop is masked; its last position stays on its stop token.
    assert rollout.key_padding[:, 0, 0, :5].tolist() == [
        [False] * 5,
        [True, False, False, False, True],
    ]
    assert rollout.last_position().tolist() == [[4], [2]]
    # Unfilled columns stay masked until written.
    assert rollout.key_padding[:, 0, 0, 5:].all()


def test_last_position_of_a_row_without_real_tokens_is_zero() -> None:
    rollout = Rollout(torch.tensor([[PAD, PAD]]), torch.tensor([[0, 0]]), SamplingParams())
    assert rollout.last_position().tolist() == [[0]]


def test_draws_follow_the_distribution_and_never_pick_a_zero_probability_id() -> None:
    from mcore_grpo.worker.sampling import _draw

    probs = torch.tensor([0.5, 0.0, 0.3, 0.15, 0.05, 0.0])
    rows = 40_000
    tokens = _draw(probs.expand(rows, -1), torch.Generator().manual_seed(0))
    counts = torch.bincount(tokens, minlength=len(probs)).double()
    assert counts[1] == 0 and counts[5] == 0
    # Each count within 5 standard deviations of its binomial expectation.
    expected = probs.double() * rows
    sigma = (expected * (1 - probs.double())).sqrt()
    assert ((counts - expected).abs() <= 5 * sigma + 1e-9).all(), counts.tolist()


def test_unnormalised_rows_and_the_top_of_the_unit_interval_stay_on_positive_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import mcore_grpo.worker.sampling as sampling

    # Trailing ids at zero probability (a padded vocab). Row sums that are powers of two
    # (1.0 for every normalised row) are where u * total rounds up to the total itself.
    probs = torch.tensor([[1.0, 3.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])

    def uniform(value: float) -> object:
        return lambda shape, generator, dtype, device: torch.full(shape, value, dtype=dtype)

    monkeypatch.setattr(sampling.torch, "rand", uniform(1 - 2.0**-53))  # the largest u < 1
    assert sampling._draw(probs, None).tolist() == [1, 1]
    monkeypatch.setattr(sampling.torch, "rand", uniform(0.0))
    assert sampling._draw(probs, None).tolist() == [0, 1]


def test_the_same_seed_draws_the_same_tokens() -> None:
    from mcore_grpo.worker.sampling import _draw

    probs = torch.softmax(torch.randn(8, 1000, generator=torch.Generator().manual_seed(3)), -1)
    first = _draw(probs, torch.Generator().manual_seed(7))
    assert torch.equal(first, _draw(probs, torch.Generator().manual_seed(7)))
    assert not torch.equal(first, _draw(probs, torch.Generator().manual_seed(8)))
