"""The built-in verifiable tasks of the CPU presets.

``digit-add`` (`DigitAddTask`, preset ``cpu-tiny``): add a small number to a digit, mod 10.

Prompt ``<bos> 7 + 1 =``, correct response ``8 <eos>``. Everything is generated in code and
the tokenizer is built locally (a `tokenizers` word-level model over 15 symbols), so a run
needs no download and no hub. The task is chosen so that GRPO on a tiny randomly initialised
GPT can visibly learn it on 2 CPU cores within minutes: with ``max_addend = 1`` there are
10 prompts, and an untrained model's sample is right by chance about 1 time in 15, so most
groups of 8 samples contain a reward difference to learn from.

``count-on`` (`CountOnTask`, preset ``cpu-count-on``): long answers, continue an arithmetic
sequence. Prompt ``<bos> + 3 = 7`` ("go on from 7 in steps of 3"); correct response: the
next `num_terms` terms 0 3 6 9 2 5 ... (mod 10), then ``<eos>`` (`num_terms` + 1 tokens, 21
with the preset's 20 terms). No chain of thought: every token is an answer token. The start
digit is the prompt's last token, so every term follows from the token before it and ``k``;
only ``<eos>`` needs the position.

Reward: the mean of two fractions over the `num_terms` + 1 positions (terms, then ``<eos>``):
- rule: the first term is a + k, every later term is the previous response token + k
  (mod 10), the last position is ``<eos>``. Local, so an untrained model (about 1 in 15 per
  token) already gets reward differences pointing at the rule;
- answer: the position holds the correct answer's token, which a fixed cycle ignoring the
  prompt cannot earn.
The exact answer scores 1.0. History: with digit-add's prompt ``<bos> 7 + 3 =`` (the start
digit three tokens back) GRPO runs collapsed onto a prompt-free cycle, ``8 9 0 1 8 9 0 1 ...``
on the rule alone (0.72 reward), ``7 8 9 0 1 7 8 9 ...`` on the mean above (0.62 after 200
steps): the transitions out of the cycle were never sampled again.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SYMBOLS: tuple[str, ...] = (PAD, BOS, EOS, *(str(d) for d in range(10)), "+", "=")

# Reward for a response whose first token is the right digit but which does not stop right
# after it (partial credit gives GRPO a signal to learn to stop).
PARTIAL_REWARD = 0.5


def build_tokenizer() -> Tokenizer:
    """A word-level tokenizer over `SYMBOLS`, ids in that order; whitespace separates tokens."""
    tokenizer = Tokenizer(WordLevel({s: i for i, s in enumerate(SYMBOLS)}, unk_token=PAD))
    tokenizer.pre_tokenizer = WhitespaceSplit()  # type: ignore[assignment]
    return tokenizer


@dataclass(frozen=True)
class Problem:
    """One prompt and the digit that answers it."""

    prompt_ids: tuple[int, ...]
    answer: int
    text: str


def score_response(response_ids: Sequence[int], answer_id: int, eos_id: int) -> float:
    """Reward of one sampled response: 1.0 for exactly ``answer <eos>``.

    0.5 (`PARTIAL_REWARD`) when the first token is the answer but the response does not end
    right after it (another token follows, or generation stopped at the length limit);
    0.0 otherwise, including an empty response.
    """
    if not response_ids or response_ids[0] != answer_id:
        return 0.0
    if len(response_ids) >= 2 and response_ids[1] == eos_id:
        return 1.0
    return PARTIAL_REWARD


class Task(Protocol):
    """What the GRPO loop and the ranks need of a task: the built-in tasks here and the real
    model's math tasks (`mcore_grpo.grpo.tasks.math_task.MathTask`)."""

    name: str
    vocab_size: int
    pad_id: int
    eos_id: int

    @property
    def max_prompt_tokens(self) -> int:
        """The longest prompt a step can draw, in tokens."""
        ...

    def sample_problems(self, n: int, seed: int, step: int) -> Sequence[Any]:
        """`n` problems of step `step`, a pure function of (seed, step)."""
        ...

    def rewards(self, responses: Sequence[Sequence[int]], problems: Sequence[Any]) -> list[float]:
        """The reward of each response to its problem."""
        ...

    def position_accuracy(
        self, responses: Sequence[Sequence[int]], problems: Sequence[Any]
    ) -> list[float]:
        """Per answer position, the share of responses right there (empty: no fixed form)."""
        ...


class DigitAddTask:
    """Problems ``a + b =`` with ``a`` in 0..9 and ``b`` in 1..max_addend; answer ``(a+b) % 10``."""

    name: str = "digit-add"

    def __init__(self, max_addend: int = 1) -> None:
        if not 1 <= max_addend <= 9:
            raise ValueError(f"task.max_addend={max_addend}: use 1..9 (single-digit addends)")
        self.max_addend = max_addend
        self.tokenizer = build_tokenizer()
        self.vocab_size = len(SYMBOLS)
        self.pad_id = self.token_id(PAD)
        self.bos_id = self.token_id(BOS)
        self.eos_id = self.token_id(EOS)
        # Longest response worth generating: the digit and <eos>.
        self.max_response_tokens = 2

    def token_id(self, symbol: str) -> int:
        """Id of one symbol of the vocabulary."""
        token_id = self.tokenizer.token_to_id(symbol)
        if token_id is None:
            raise KeyError(f"{symbol!r} is not in the task vocabulary {SYMBOLS}")
        return token_id

    def problem(self, a: int, b: int) -> Problem:
        """The problem ``a + b =``."""
        text = f"{BOS} {a} + {b} ="
        ids = tuple(self.tokenizer.encode(text).ids)
        return Problem(prompt_ids=ids, answer=(a + b) % 10, text=text)

    def all_problems(self) -> list[Problem]:
        """Every distinct problem (10 * max_addend of them)."""
        return [self.problem(a, b) for a in range(10) for b in range(1, self.max_addend + 1)]

    def sample_problems(self, n: int, seed: int, step: int) -> list[Problem]:
        """`n` problems drawn with replacement, a pure function of (seed, step) for resume."""
        rng = random.Random(f"{seed}:{step}")
        return [self.problem(rng.randrange(10), rng.randint(1, self.max_addend)) for _ in range(n)]

    def reward(self, response_ids: Sequence[int], problem: Problem) -> float:
        """`score_response` against this problem's answer."""
        return score_response(response_ids, self.token_id(str(problem.answer)), self.eos_id)

    def rewards(self, responses: Sequence[Sequence[int]], problems: Sequence[Any]) -> list[float]:
        """`reward` of each response."""
        return [self.reward(r, p) for r, p in zip(responses, problems, strict=True)]

    @property
    def max_prompt_tokens(self) -> int:
        """The longest prompt of `all_problems`."""
        return max(len(p.prompt_ids) for p in self.all_problems())

    def targets(self, problem: Problem) -> list[int]:
        """Token ids of the exact answer: the digit, then ``<eos>``."""
        return [self.token_id(str(problem.answer)), self.eos_id]

    def position_accuracy(
        self, responses: Sequence[Sequence[int]], problems: Sequence[Problem]
    ) -> list[float]:
        """Per answer position i, the share of responses whose token i is the target's.

        Says WHICH position keeps a near-perfect reward from being an exact answer (a
        response too short to reach position i counts as wrong there)."""
        if len(responses) != len(problems):
            raise ValueError(f"{len(responses)} responses for {len(problems)} problems")
        width = self.max_response_tokens
        hits = [0] * width
        for response, problem in zip(responses, problems, strict=True):
            for i, (got, want) in enumerate(zip(response, self.targets(problem), strict=False)):
                hits[i] += got == want
        return [h / max(len(responses), 1) for h in hits]

    def decode(self, ids: Sequence[int]) -> str:
        """Readable text of token ids (for logs)."""
        return " ".join(SYMBOLS[i] if 0 <= i < len(SYMBOLS) else f"<{i}?>" for i in ids)


def count_on_targets(start: int, step: int, num_terms: int) -> list[int]:
    """The digits start+step, start+2*step, ... (mod 10), `num_terms` of them."""
    return [(start + step * (i + 1)) % 10 for i in range(num_terms)]


def score_rule(
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


def score_answer(response_ids: Sequence[int], target_ids: Sequence[int]) -> float:
    """Fraction of target positions where the response holds the target token."""
    hits = sum(1 for got, want in zip(response_ids, target_ids, strict=False) if got == want)
    return hits / len(target_ids)


class CountOnTask(DigitAddTask):
    """``+ k = a`` -> the `num_terms` next terms of a, a+k, a+2k, ... mod 10, then ``<eos>``.

    Shares digit-add's vocabulary and tokenizer (its first answer term is digit-add's
    answer); ``k`` is in 1..max_addend."""

    name: str = "count-on"

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

    def problem(self, a: int, b: int) -> Problem:
        """The problem ``+ b = a``: go on from `a` in steps of `b`; `answer` is the first term."""
        text = f"{BOS} + {b} = {a}"
        ids = tuple(self.tokenizer.encode(text).ids)
        return Problem(prompt_ids=ids, answer=(a + b) % 10, text=text)

    def _operands(self, problem: Problem) -> tuple[int, int]:
        # Prompt ids: <bos> + k = a ; digits' ids are their symbols' positions in SYMBOLS.
        _, _, k_id, _, a_id = problem.prompt_ids
        return int(self.decode([a_id])), int(self.decode([k_id]))

    def sample_problems(self, n: int, seed: int, step: int) -> list[Problem]:
        """`n` problems drawn with replacement, a pure function of (seed, step) for resume."""
        rng = random.Random(f"count-on:{seed}:{step}")
        return [self.problem(rng.randrange(10), rng.randint(1, self.max_addend)) for _ in range(n)]

    def reward(self, response_ids: Sequence[int], problem: Problem) -> float:
        """Mean of `score_rule` and `score_answer` for this problem."""
        a, k = self._operands(problem)
        digits = [self.token_id(str(d)) for d in range(10)]
        first = digits[(a + k) % 10]
        rule = score_rule(response_ids, first, k, self.eos_id, digits, self.num_terms)
        return 0.5 * rule + 0.5 * score_answer(response_ids, self.targets(problem))


def build_task(name: str, max_addend: int = 1, num_terms: int = 20) -> DigitAddTask:
    """The task named by ``task.name`` in the run config (``num_terms``: count-on only)."""
    if name == DigitAddTask.name:
        return DigitAddTask(max_addend=max_addend)
    if name == CountOnTask.name:
        return CountOnTask(max_addend=max_addend, num_terms=num_terms)
    raise ValueError(
        f"task.name={name!r}: the built-in tasks are {DigitAddTask.name!r} and {CountOnTask.name!r}"
    )
