"""Tripwire of patches/NeMo-RL/math-verify-graded-by-stated-answer.patch.

NeMo-RL's default math verifier, `hf_math_verify` (`HFVerifyWorker.verify` in
nemo_rl/environments/math_environment.py, the class under its Ray actor, run in this process
as `mcore_grpo.grpo.tasks.nemo_rl_math.MathVerifier` runs it), grades the prediction math-verify
extracts from the response. math-verify evaluates an arithmetic expression it extracts, so a
response that only restates the question "What is 31 + 21?" matches the ground truth 52.
GRPO found and amplified that within 8 steps (docs/real-model.md, run 2); `GRPO_RESTATEMENT`
is one of that run's responses.

Unpatched the restatement scores 1.0 (in every form below); patched 0.0, while a correct
``\\boxed{}`` answer, and an answer stated in plain text, still score 1.0.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

pytestmark = pytest.mark.nemo_rl

GRPO_RESTATEMENT = (
    "To find 31 + 21, we need to follow a specific procedure.\n\nTo find 31 + 21, we need"
)

Scores = Callable[[list[str], list[str]], list[float]]


@pytest.fixture(scope="module")
def hf_math_verify(nemo_rl_on_path: Path) -> Scores:
    """NeMo-RL's `hf_math_verify` scores, one per (response, ground truth)."""
    from nemo_rl.environments import math_environment

    module_file = Path(math_environment.__file__).resolve()
    assert module_file.is_relative_to(nemo_rl_on_path.resolve()), (
        f"nemo_rl imported from {module_file}, not from the tree under test {nemo_rl_on_path}"
    )
    # ray.remote keeps the decorated class here; NeMo-RL's MathEnvironment runs this class.
    worker = cast(Any, math_environment.HFVerifyWorker).__ray_metadata__.modified_class()

    def scores(responses: list[str], ground_truths: list[str]) -> list[float]:
        return list(worker.verify(responses, ground_truths, math_verify_impl="hf_math_verify"))

    return scores


def test_restated_question_scores_zero_boxed_answer_one(hf_math_verify: Scores) -> None:
    responses = {
        "the GRPO run's restatement": GRPO_RESTATEMENT,
        "a correct boxed answer": "\\boxed{52}",
        "worked, then boxed": "31 + 21 = \\boxed{52}",
    }
    got = dict(zip(responses, hf_math_verify(list(responses.values()), ["52"] * 3), strict=True))
    assert got == {
        "the GRPO run's restatement": 0.0,
        "a correct boxed answer": 1.0,
        "worked, then boxed": 1.0,
    }, "unpatched, hf_math_verify scores the restated question 1.0"


def test_restated_arithmetic_scores_zero_in_every_form(hf_math_verify: Scores) -> None:
    """The restatement in the forms a policy can move to once the plain one stops paying
    (after the word "answer", in LaTeX, boxed; each operation of the arithmetic preset),
    beside answers that state the number, which keep scoring 1."""
    cases = {
        # response: (ground truth, score)
        "The answer to 31 + 21 is": ("52", 0.0),
        "To find $31 + 21$, we add.": ("52", 0.0),
        "\\boxed{31 + 21}": ("52", 0.0),
        "To find 7 * 8, we multiply.": ("56", 0.0),
        "To find 3 - 8, we subtract.": ("-5", 0.0),
        "The answer is 52.": ("52", 1.0),
        "31 + 21 = 52": ("52", 1.0),
        "3 - 8 = -5": ("-5", 1.0),
        "Answer: 56": ("56", 1.0),
    }
    scores = hf_math_verify(list(cases), [truth for truth, _ in cases.values()])
    got = dict(zip(cases, scores, strict=True))
    assert got == {response: score for response, (_, score) in cases.items()}
