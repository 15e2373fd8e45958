"""`state_sampler.generate_through_state`'s input checks (its tokens are tested against
`transformers` in test_recurrent_layers_padding.py and test_gated_delta_net_generation.py)."""

from __future__ import annotations

import pytest
import torch
from mcore_grpo.worker.sampling import SamplingParams
from mcore_grpo.worker.state_sampler import generate_through_state


def test_a_prompt_row_without_a_real_token_is_refused_by_its_row_number() -> None:
    ids = torch.tensor([[5, 6, 7], [0, 0, 0]])
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])
    model = torch.nn.Linear(1, 1)  # never reached: the check comes before any forward
    with pytest.raises(ValueError, match="prompt row 1 has no real token"):
        generate_through_state(model, ids, mask, SamplingParams(), vocab_size=8)
