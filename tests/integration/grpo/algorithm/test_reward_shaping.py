"""What counts as a response that did not stop, and the config's refusals (the shaping math
itself is checked against NeMo-RL's `apply_reward_shaping` in test_nemo_rl_parity.py)."""

from __future__ import annotations

from typing import cast

import pytest
import torch
from mcore_grpo.config.grpo import RewardShapingConfig
from mcore_grpo.config.loader import load_config
from mcore_grpo.grpo.algorithm.reward_shaping import loss_multipliers, truncated
from mcore_grpo.grpo.tasks.evaluation import Evaluator
from mcore_grpo.grpo.tasks.task import Task


def test_a_response_is_truncated_unless_it_ends_on_a_stop_token() -> None:
    # EOS 2, a second stop 7: ended by either, cut off after 3 tokens, a stop mid-response
    # (not the last token: the budget ran out after it, which a sampler never does), empty.
    responses = [[5, 2], [5, 7], [5, 6, 4], [2, 5, 6], []]
    assert truncated(responses, (2, 7)).tolist() == [False, False, True, True, True]
    assert loss_multipliers(truncated(responses, (2, 7)), True) == [1, 1, 0, 0, 0]
    assert loss_multipliers(truncated(responses, (2, 7)), False) == [1] * 5


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["grpo.reward_shaping.stop_properly_penalty_coef=1.5"], r"must be in \[0, 1\]"),
        (
            ["grpo.reward_shaping.enabled=true"],
            r"set grpo.reward_shaping.overlong_buffer_length \(unset: overlong_buffer_length, "
            r"overlong_buffer_penalty, max_response_length\)",
        ),
        (
            [
                "grpo.reward_shaping.enabled=true",
                "grpo.reward_shaping.overlong_buffer_length=0",
                "grpo.reward_shaping.overlong_buffer_penalty=1",
                "grpo.reward_shaping.max_response_length=48",
            ],
            "must be > 0",
        ),
    ],
)
def test_a_shaping_that_cannot_run_is_refused_when_the_config_loads(
    overrides: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        load_config(overrides=overrides)


def test_the_grade_counts_responses_that_ran_to_the_budget() -> None:
    class _Task:
        eval: tuple[int, ...] = ()

        def rewards(self, responses: list[list[int]], problems: list[int]) -> list[float]:
            return [1.0] * len(responses)

    task = cast(Task, _Task())
    graded = Evaluator(task, 10, stop_token_ids=[2]).score(
        0, [0, 0, 0, 0], [[5, 2], [5], [2], [5, 6]]
    )
    assert graded["validation/truncation_rate"] == 0.5
    assert "validation/truncation_rate" not in Evaluator(task, 10).score(0, [0], [[5]])
    assert RewardShapingConfig().enabled is False
    assert torch.equal(truncated([[1]], ()), torch.tensor([True]))
