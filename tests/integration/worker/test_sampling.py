"""`Rollout`'s per-step decode state (key-padding mask, last position), by hand values."""

from __future__ import annotations

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
