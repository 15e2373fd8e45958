"""NeMo-RL <-> worker batch layouts, against hand-written tensors."""

from __future__ import annotations

import torch
from mcore_grpo.nemo_rl_driver.batches import generation_output, left_pad, length_mask, worker_batch


def test_length_mask_marks_the_first_lengths_columns() -> None:
    mask = length_mask(torch.tensor([2, 0, 3]), 4)
    assert mask.tolist() == [[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0]]


def test_worker_batch_keeps_row_tensors_and_adds_the_attention_mask() -> None:
    data = {
        "input_ids": torch.tensor([[5, 6, 0], [7, 8, 9]]),
        "input_lengths": torch.tensor([2, 3]),
        "token_mask": torch.tensor([[0, 1, 0], [0, 1, 1]]),
        "sample_mask": torch.tensor([1.0, 0.0]),
        "content": ["a", "b"],  # not a tensor: dropped
        "scalar": torch.tensor(3.0),  # not per row: dropped
    }
    batch = worker_batch(data)
    assert sorted(batch) == [
        "attention_mask",
        "input_ids",
        "input_lengths",
        "sample_mask",
        "token_mask",
    ]
    assert batch["attention_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]


def test_left_pad_moves_each_prompt_to_the_right_edge() -> None:
    ids, mask = left_pad(
        torch.tensor([[5, 6, 0], [7, 8, 9], [4, 0, 0]]), torch.tensor([2, 3, 1]), pad_id=0
    )
    assert ids.tolist() == [[0, 5, 6], [7, 8, 9], [0, 0, 4]]
    assert mask.tolist() == [[0, 1, 1], [1, 1, 1], [0, 0, 1]]


def test_generation_output_is_right_padded_with_lengths_and_truncation() -> None:
    # Left-padded sampler output: prompt width 3, budget 2; row 0 stopped on eos (2) after one
    # token, row 1 used the budget without a stop token.
    output_ids = torch.tensor([[0, 5, 6, 2, 0], [7, 8, 9, 3, 4]])
    logprobs = torch.tensor([[0, 0, 0, -0.5, 0], [0, 0, 0, -1.0, -2.0]])
    out = generation_output(
        torch.tensor([[5, 6, 0], [7, 8, 9]]),
        torch.tensor([2, 3]),
        output_ids,
        logprobs,
        torch.tensor([1, 2]),
        prompt_width=3,
        max_new_tokens=2,
        stop_token_ids=(2,),
        pad_id=0,
    )
    assert out["output_ids"].tolist() == [[5, 6, 2, 0, 0], [7, 8, 9, 3, 4]]
    assert out["logprobs"].tolist() == [[0, 0, -0.5, 0, 0], [0, 0, 0, -1.0, -2.0]]
    assert out["generation_lengths"].tolist() == [1, 2]
    assert out["unpadded_sequence_lengths"].tolist() == [3, 5]
    assert out["truncated"].tolist() == [False, True]
