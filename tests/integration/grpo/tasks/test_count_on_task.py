"""The count-on task (long answers): targets and rewards worked out by hand, its preset."""

from __future__ import annotations

import pytest
from mcore_grpo.config.loader import load_config
from mcore_grpo.grpo.tasks.task import CountOnTask, build_task


def _ids(task: CountOnTask, text: str) -> list[int]:
    return list(task.tokenizer.encode(text).ids)


def test_targets_hand_checked() -> None:
    task = CountOnTask(max_addend=3, num_terms=6)
    problem = task.problem(7, 3)
    assert task.decode(problem.prompt_ids) == "<bos> + 3 = 7"
    # 7+3=10 -> 0, 3, 6, 9, 12 -> 2, 15 -> 5, then <eos>.
    assert task.decode(task.targets(problem)) == "0 3 6 9 2 5 <eos>"
    assert task.max_response_tokens == 7


def test_reward_hand_checked() -> None:
    """Reward = (rule fraction + answer fraction) / 2 over the 7 positions (6 terms, <eos>)."""
    task = CountOnTask(max_addend=3, num_terms=6)
    problem = task.problem(7, 3)  # answer 0 3 6 9 2 5 <eos>
    assert task.reward(_ids(task, "0 3 6 9 2 5 <eos>"), problem) == 1.0
    # One slip (7 for 6), then +3 from it, no <eos>: rule 5/7 (0 3 . 0 3 6 .), answer 2/7.
    assert task.reward(_ids(task, "0 3 7 0 3 6 9"), problem) == pytest.approx(7 / 14)
    # Right terms, no <eos> (stopped at the length limit): 6/7 and 6/7.
    assert task.reward(_ids(task, "0 3 6 9 2 5 8"), problem) == pytest.approx(6 / 7)
    # Wrong first term (7 + 3 is 0, not 1), then +3: rule 6/7, answer only <eos> 1/7.
    assert task.reward(_ids(task, "1 4 7 0 3 6 <eos>"), problem) == pytest.approx(7 / 14)
    # A non-digit spoils its own position and the next: rule 1/7, answer 1/7.
    assert task.reward(_ids(task, "0 <eos> 3"), problem) == pytest.approx(1 / 7)
    # A cycle that ignores the prompt scores on the rule only where it is +3.
    cycle = task.reward(_ids(task, "8 1 4 7 8 1 4"), task.problem(2, 3))
    assert cycle == pytest.approx((4 / 7 + 0 / 7) / 2)
    assert task.reward([], problem) == 0.0


def test_problems_are_a_function_of_seed_and_step() -> None:
    task = CountOnTask(max_addend=3, num_terms=20)
    a = task.sample_problems(32, seed=1, step=5)
    assert a == task.sample_problems(32, seed=1, step=5)
    assert a != task.sample_problems(32, seed=1, step=6)
    steps = {int(task.decode([p.prompt_ids[2]])) for p in a}
    assert steps <= {1, 2, 3} and len(steps) > 1


def test_build_task_and_preset() -> None:
    cfg = load_config("cpu-count-on")
    task = build_task(cfg.task.name, cfg.task.max_addend, cfg.task.num_terms)
    assert isinstance(task, CountOnTask)
    assert cfg.policy.generation.max_new_tokens == task.max_response_tokens == 21
    # Rope positions are what let the preset learn (learned absolute ones collapse, docs/grpo.md).
    assert cfg.policy.tiny_model.position_embedding_type == "rope"
    prompt_len = max(len(p.prompt_ids) for p in task.all_problems())
    assert prompt_len + task.max_response_tokens <= cfg.policy.max_total_sequence_length
    with pytest.raises(ValueError, match="count-on"):
        build_task("nope")
    with pytest.raises(ValueError, match="num_terms"):
        CountOnTask(num_terms=0)


def test_position_accuracy_names_the_wrong_position() -> None:
    """Per answer position, the share of responses holding the target token there."""
    task = CountOnTask(max_addend=3, num_terms=4)
    problem = task.problem(7, 3)  # answer 0 3 6 9 <eos>
    responses = [
        _ids(task, "0 3 6 9 <eos>"),  # exact
        _ids(task, "0 3 6 9 2"),  # every term right, no <eos> (ran to the token budget)
        _ids(task, "0 3"),  # stopped early (no <eos> either): later positions count as wrong
        _ids(task, "1 3 6 9 <eos>"),  # first term wrong
    ]
    assert task.position_accuracy(responses, [problem] * 4) == [0.75, 1.0, 0.75, 0.75, 0.5]
    with pytest.raises(ValueError, match="responses"):
        task.position_accuracy(responses, [problem])


def test_position_accuracy_of_digit_add() -> None:
    task = build_task("digit-add")
    problem = task.problem(7, 1)  # answer 8 <eos>
    responses = [list(task.tokenizer.encode(t).ids) for t in ("8 <eos>", "8 8", "3")]
    assert task.position_accuracy(responses, [problem] * 3) == [2 / 3, 1 / 3]


def test_step_line_names_the_least_accurate_position() -> None:
    from mcore_grpo.grpo.driver.metrics import step_line

    record = {
        "step": 3,
        "reward_mean": 0.95,
        "loss": 0.1,
        "kl": 0.2,
        "generation_time_s": 1.0,
        "logprob_time_s": 0.1,
        "training_time_s": 0.2,
        "step_time_s": 1.4,
        "position_accuracy": [1.0, 0.99, 0.0],
    }
    assert "worst position 2 0.00" in step_line(record, 10)
    del record["position_accuracy"]
    assert "worst position" not in step_line(record, 10)
