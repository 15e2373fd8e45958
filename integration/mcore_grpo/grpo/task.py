"""The built-in verifiable task for the CPU preset: add a small number to a digit, mod 10.

Prompt ``<bos> 7 + 1 =``, correct response ``8 <eos>``. Everything is generated in code and
the tokenizer is built locally (a `tokenizers` word-level model over 15 symbols), so a run
needs no download and no hub. The task is chosen so that GRPO on a tiny randomly initialised
GPT can visibly learn it on 2 CPU cores within minutes: with ``max_addend = 1`` there are
10 prompts, and an untrained model's sample is right by chance about 1 time in 15, so most
groups of 8 samples contain a reward difference to learn from.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

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


class DigitAddTask:
    """Problems ``a + b =`` with ``a`` in 0..9 and ``b`` in 1..max_addend; answer ``(a+b) % 10``."""

    name = "digit-add"

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

    def decode(self, ids: Sequence[int]) -> str:
        """Readable text of token ids (for logs)."""
        return " ".join(SYMBOLS[i] if 0 <= i < len(SYMBOLS) else f"<{i}?>" for i in ids)


def build_task(name: str, max_addend: int = 1, num_terms: int = 20) -> DigitAddTask:
    """The task named by ``task.name`` in the run config (``num_terms``: count-on only)."""
    from mcore_grpo.grpo.count_on_task import CountOnTask

    if name == DigitAddTask.name:
        return DigitAddTask(max_addend=max_addend)
    if name == CountOnTask.name:
        return CountOnTask(max_addend=max_addend, num_terms=num_terms)
    raise ValueError(
        f"task.name={name!r}: the built-in tasks are {DigitAddTask.name!r} and {CountOnTask.name!r}"
    )
