"""Held-out evaluation: which problems, how a set of greedy responses scores, where the
samples go.

The responses come from the policy workers' own generation (`PolicyRank.evaluate`, greedy);
the score is the task's reward, for the math tasks NeMo-RL's verifier, so an "accuracy" here is
exactly what the training reward calls correct. The same `score` grades an exported
checkpoint's `transformers.generate` responses (`mcore_grpo.grpo.tasks.hf_eval`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcore_grpo.grpo.algorithm.reward_shaping import truncated
from mcore_grpo.grpo.tasks.task import Task

SAMPLES_FILE = "validation_samples.jsonl"


def states_answer(text: str, answer: str) -> bool:
    """Whether `text` writes `answer` as a number of its own (not inside a longer one).

    Why: at the pin, NeMo-RL's hf_math_verify evaluated plain expressions in a response, so a
    response that merely restated an arithmetic question ("To find 31 + 21, we need") scored 1;
    GRPO found that within 8 steps here (docs/real-model.md). The series' NeMo-RL patch
    math-verify-graded-by-stated-answer fixes that verifier; `validation/answer_stated`, the
    share of responses that do write the answer, stays beside the verifier's accuracy as the
    independent check for any verifier.
    """
    # Not inside a longer number ("152", "5.2"); a sentence's closing period may follow.
    return re.search(rf"(?<![\d.]){re.escape(answer)}(?!\d|\.\d)", text) is not None


def question_of(problem: Any) -> dict[str, str]:
    """``{"question": ...}`` for a math problem (so a sample can be matched to the training
    set), nothing for the toy tasks, whose problems have no text."""
    question = getattr(problem, "question", None)
    return {"question": question} if isinstance(question, str) else {}


class Evaluator:
    """The held-out problems of a task (its ``eval`` split, at most `max_samples`)."""

    def __init__(
        self, task: Task, max_samples: int, stop_token_ids: Sequence[int] | None = None
    ) -> None:
        """`stop_token_ids`: what ends a response; given, a grade also says how many responses
        ran to the token budget instead (``validation/truncation_rate``)."""
        self.task = task
        self.stop_token_ids = tuple(stop_token_ids or ())
        held_out: Sequence[Any] = getattr(task, "eval", None) or []
        self.problems = list(held_out[:max_samples])

    def score(
        self,
        step: int,
        problems: Sequence[Any],
        responses: Sequence[Sequence[int]],
        output_dir: Path | None = None,
    ) -> dict[str, float]:
        """``validation/accuracy`` (share of responses the verifier scores 1) and the mean
        response length; every sample appended to `output_dir`/validation_samples.jsonl."""
        scores = self.task.rewards(responses, problems)
        # Math tasks decode to the text the verifier read; others (the toy tasks) to tokens.
        text_of = getattr(self.task, "response_text", None)
        texts = [text_of(r) for r in responses] if text_of is not None else None
        stated = (
            [states_answer(t, str(p.answer)) for p, t in zip(problems, texts, strict=True)]
            if texts is not None
            else []
        )
        if output_dir is not None:
            decoded = texts or [self.task.decode(r) for r in responses]  # type: ignore[attr-defined]
            with (output_dir / SAMPLES_FILE).open("a") as f:
                for problem, text, score in zip(problems, decoded, scores, strict=True):
                    f.write(
                        json.dumps(
                            {
                                "step": step,
                                **question_of(problem),
                                "answer": str(problem.answer),
                                "response": text,
                                "score": score,
                            }
                        )
                        + "\n"
                    )
        n = max(len(scores), 1)
        return {
            "validation/accuracy": sum(s == 1.0 for s in scores) / n,
            "validation/problems": float(len(scores)),
            "validation/response_tokens_mean": sum(len(r) for r in responses) / n,
            **({"validation/answer_stated": sum(stated) / n} if stated else {}),
            **(
                {
                    "validation/truncation_rate": float(
                        truncated(responses, self.stop_token_ids).sum()
                    )
                    / n
                }
                if self.stop_token_ids
                else {}
            ),
        }
