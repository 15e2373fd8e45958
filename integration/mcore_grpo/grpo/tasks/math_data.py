"""Math problems for the real-model tasks: generated arithmetic, GSM8K, any local JSONL/Parquet.

Each source gives `MathItem`s (question text, final answer as a string, where it came from).
The answer is what NeMo-RL's math verifier compares against (`mcore_grpo.grpo.tasks.math_task`).

- Arithmetic (`arithmetic_items`): generated in code, no file. The difficulty knob is
  `ArithmeticSpec`: how many digits each operand has, which operations, how many operands.
  SmolLM2-135M-Instruct, greedy, 96 new tokens, with NeMo-RL's chain-of-thought prompt (32
  problems each, measured 2026-11-25; docs/real-model.md): see the preset for the level used.
- Files (`load_items`): JSONL (one object per line) or Parquet rows with a question field and
  an answer field, named by config keys. ``answer_format="gsm8k"`` takes the final answer after
  ``#### `` (GSM8K's worked solutions; thousands commas dropped), ``"plain"`` the field as it
  is (NeMo-RL's ``problem``/``expected_answer`` shape). A row without an answer, or a file
  that cannot be read, is refused naming the file and line.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcore_grpo.config.schema import ConfigError

GSM8K_MARK = "#### "
OPERATIONS = ("+", "-", "*")


@dataclass(frozen=True)
class MathItem:
    """One problem: the question shown to the model and the final answer the verifier wants."""

    question: str
    answer: str
    source: str  # "file:line" or "arithmetic:<index>", for error messages and logs


@dataclass(frozen=True)
class ArithmeticSpec:
    """The arithmetic difficulty knob: `terms` operands, each with 1 to `digits` digits (the
    count drawn uniformly, then the value), joined by operations drawn from `operations`
    (the usual precedence: ``*`` before ``+``/``-``)."""

    digits: int = 2
    operations: tuple[str, ...] = ("+",)
    terms: int = 2

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= 6:
            raise ConfigError(f"task.arithmetic.digits={self.digits}: use 1..6")
        if not 2 <= self.terms <= 6:
            raise ConfigError(f"task.arithmetic.terms={self.terms}: use 2..6")
        bad = [op for op in self.operations if op not in OPERATIONS]
        if bad or not self.operations:
            raise ConfigError(
                f"task.arithmetic.operations={list(self.operations)}: use a non-empty subset "
                f"of {list(OPERATIONS)}"
            )


def arithmetic_item(spec: ArithmeticSpec, rng: random.Random, index: int) -> MathItem:
    """One random problem of `spec` ("What is 37 + 58?", answer "95")."""
    numbers = []
    for _ in range(spec.terms):
        width = rng.randint(1, spec.digits)
        numbers.append(rng.randint(10 ** (width - 1) if width > 1 else 1, 10**width - 1))
    ops = [rng.choice(spec.operations) for _ in range(spec.terms - 1)]
    expression = str(numbers[0])
    for op, number in zip(ops, numbers[1:], strict=True):
        expression += f" {op} {number}"
    value = eval(expression, {"__builtins__": {}})  # digits and + - * only, built above
    return MathItem(f"What is {expression}?", str(value), f"arithmetic:{index}")


def arithmetic_items(spec: ArithmeticSpec, count: int, seed: int) -> list[MathItem]:
    """`count` distinct problems of `spec`, a pure function of (`spec`, `count`, `seed`)."""
    rng = random.Random(f"arithmetic:{seed}")
    items: dict[str, MathItem] = {}
    attempts = 0
    while len(items) < count:
        attempts += 1
        if attempts > 50 * count + 1000:
            raise ConfigError(
                f"task.arithmetic: only {len(items)} distinct problems of {spec} exist; ask "
                f"for fewer than {count} or raise task.arithmetic.digits"
            )
        item = arithmetic_item(spec, rng, len(items))
        items.setdefault(item.question, item)
    return list(items.values())


def gsm8k_final_answer(solution: str) -> str | None:
    """The final answer of a GSM8K worked solution (after the last ``#### ``), commas
    dropped; None when there is no such line."""
    _, mark, tail = solution.rpartition(GSM8K_MARK)
    if not mark:
        return None
    answer = tail.strip().replace(",", "")
    return answer or None


def _rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line or row number, 1-based; row) of a JSONL or Parquet file."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such file (task.dataset.train_path / eval_path)")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq

            table = pq.read_table(path)
        except Exception as err:
            raise ConfigError(f"{path}: cannot read it as Parquet ({err})") from err
        for number, row in enumerate(table.to_pylist(), start=1):
            yield number, row
        return
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read it as UTF-8 JSONL ({err})") from err
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}:{number}: not a JSON object ({err.msg})") from err
        if not isinstance(row, dict):
            raise ConfigError(f"{path}:{number}: a JSON {type(row).__name__}, not an object")
        yield number, row


def load_items(
    path: Path, question_key: str, answer_key: str, answer_format: str = "gsm8k"
) -> list[MathItem]:
    """Every row of `path` as a `MathItem`; raises `ConfigError` naming the file and line."""
    if answer_format not in ("gsm8k", "plain"):
        raise ConfigError(
            f"task.dataset.answer_format={answer_format!r}: use 'gsm8k' (final answer after "
            "'#### ') or 'plain' (the field is the answer)"
        )
    items = []
    for number, row in _rows(path):
        where = f"{path}:{number}"
        question, raw = row.get(question_key), row.get(answer_key)
        if not isinstance(question, str) or not question.strip():
            raise ConfigError(
                f"{where}: no question in field {question_key!r} (task.dataset.question_key; "
                f"the row has {sorted(row)})"
            )
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            raise ConfigError(
                f"{where}: no answer in field {answer_key!r} (task.dataset.answer_key; the "
                f"row has {sorted(row)})"
            )
        answer = gsm8k_final_answer(str(raw)) if answer_format == "gsm8k" else str(raw).strip()
        if answer is None:
            raise ConfigError(
                f"{where}: field {answer_key!r} has no final answer line '{GSM8K_MARK}...'; "
                "set task.dataset.answer_format=plain if the field is the answer itself"
            )
        items.append(MathItem(question.strip(), answer, where))
    if not items:
        raise ConfigError(f"{path}: no rows")
    return items


def split_items(
    items: list[MathItem], eval_size: int, seed: int
) -> tuple[list[MathItem], list[MathItem]]:
    """(train, eval): a seeded shuffle cut into a held-out eval split of `eval_size` and the
    rest; no question appears in both."""
    if not 0 < eval_size < len(items):
        raise ConfigError(f"task.eval_size={eval_size}: need 0 < eval_size < {len(items)} problems")
    order = list(items)
    random.Random(f"split:{seed}").shuffle(order)
    held = order[:eval_size]
    seen = {item.question for item in held}
    return [item for item in order[eval_size:] if item.question not in seen], held


def widen_training_pool(
    train: list[MathItem], held: list[MathItem], pool: list[MathItem], base_share: float = 0.0
) -> list[MathItem]:
    """`train` followed by the problems of `pool` that are neither held out nor already in
    `train`: more distinct problems to learn from, so that what held-out accuracy measures is
    arithmetic rather than a few dozen memorised answers, while the held-out split stays the
    one the baseline was measured on.

    `base_share` > 0 repeats `train` so that it is about that share of the list (draws are
    uniform over it): a wide pool of harder problems gives an untrained policy no reward to
    learn from, while the split's own problems, at the held-out level, sometimes do."""
    if not 0.0 <= base_share < 1.0:
        raise ConfigError(f"task.arithmetic.base_share={base_share}: use 0 <= share < 1")
    seen = {item.question for item in held} | {item.question for item in train}
    extra = []
    for item in pool:
        if item.question not in seen:
            seen.add(item.question)
            extra.append(item)
    repeats = 1
    if base_share and extra and train:
        repeats = max(1, round(base_share * len(extra) / ((1.0 - base_share) * len(train))))
    return list(train) * repeats + extra
