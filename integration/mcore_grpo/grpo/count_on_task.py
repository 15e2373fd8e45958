"""A task with long answers for the `cpu-count-on` preset: continue an arithmetic sequence.

Prompt ``<bos> 7 + 3 =`` (digit-add's prompt); correct response: the next `num_terms` terms of
7, 7+3, 7+6, ... mod 10, then ``<eos>``: ``0 3 6 9 2 5 8 1 4 7 ... <eos>`` (`num_terms` + 1
tokens, 21 with the preset's 20 terms). No chain of thought: every token is an answer token.

Each term depends on the previous one and on the step ``k`` in the prompt, so a model must
learn both "add k to the last digit, mod 10" and where to stop. That is learnable by GRPO on
a tiny GPT from scratch on 2 CPU cores within minutes, while every rollout generates tens of
tokens, which is what the preset exists to exercise (the KV-cache sampler).

Reward: the fraction of the `num_terms` + 1 positions that follow the rule: the first term is
a + k, every later term is the previous response token + k (mod 10), and position
`num_terms` is ``<eos>``. The exact answer scores 1.0; one wrong term costs one position (a
response that goes on correctly from its own slip is not zeroed). The rule is local (the last
token and k), so an untrained model (about 1 in 15 per token) already gives groups reward
differences that point at the rule, whatever it sampled before.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from mcore_grpo.grpo.task import DigitAddTask, Problem


def count_on_targets(start: int, step: int, num_terms: int) -> list[int]:
    """The digits start+step, start+2*step, ... (mod 10), `num_terms` of them."""
    return [(start + step * (i + 1)) % 10 for i in range(num_terms)]


def score_sequence(
    response_ids: Sequence[int],
    first_id: int,
    step: int,
    eos_id: int,
    digit_ids: Sequence[int],
    num_terms: int,
) -> float:
    """Fraction of the `num_terms` + 1 positions that follow the count-on rule.

    `digit_ids[d]` is the token id of digit d. Position 0 must be `first_id`; position i in
    1..num_terms-1 must be the digit of (response digit at i-1) + step, mod 10 (a non-digit at
    i-1 makes position i wrong); position `num_terms` must be `eos_id`.
    """
    digit_of = {tid: d for d, tid in enumerate(digit_ids)}
    hits = 0
    for i, got in enumerate(response_ids[: num_terms + 1]):
        if i == num_terms:
            hits += got == eos_id
        elif i == 0:
            hits += got == first_id
        else:
            prev = digit_of.get(response_ids[i - 1])
            hits += prev is not None and got == digit_ids[(prev + step) % 10]
    return hits / (num_terms + 1)


class CountOnTask(DigitAddTask):
    """``a + k =`` -> the `num_terms` next terms of a, a+k, a+2k, ... mod 10, then ``<eos>``.

    Shares digit-add's vocabulary, tokenizer and prompts (its first answer term is digit-add's
    answer); ``k`` is in 1..max_addend."""

    name = "count-on"

    def __init__(self, max_addend: int = 1, num_terms: int = 20) -> None:
        super().__init__(max_addend=max_addend)
        if not 1 <= num_terms <= 200:
            raise ValueError(f"task.num_terms={num_terms}: use 1..200")
        self.num_terms = num_terms
        self.max_response_tokens = num_terms + 1

    def targets(self, problem: Problem) -> list[int]:
        """Token ids of the correct response (terms, then ``<eos>``)."""
        a, k = self._operands(problem)
        digits = count_on_targets(a, k, self.num_terms)
        return [self.token_id(str(d)) for d in digits] + [self.eos_id]

    def _operands(self, problem: Problem) -> tuple[int, int]:
        # Prompt ids: <bos> a + k = ; digits' ids are their symbols' positions in SYMBOLS.
        _, a_id, _, k_id, _ = problem.prompt_ids
        return int(self.decode([a_id])), int(self.decode([k_id]))

    def sample_problems(self, n: int, seed: int, step: int) -> list[Problem]:
        """`n` problems drawn with replacement, a pure function of (seed, step) for resume."""
        rng = random.Random(f"count-on:{seed}:{step}")
        return [self.problem(rng.randrange(10), rng.randint(1, self.max_addend)) for _ in range(n)]

    def reward(self, response_ids: Sequence[int], problem: Problem) -> float:
        """`score_sequence` for this problem's first term and step."""
        a, k = self._operands(problem)
        digits = [self.token_id(str(d)) for d in range(10)]
        first = digits[(a + k) % 10]
        return score_sequence(response_ids, first, k, self.eos_id, digits, self.num_terms)
