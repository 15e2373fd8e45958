"""The real-model tasks' problem sources: generated arithmetic, GSM8K and other local files.

The oracle for GSM8K is the file itself, read here with `json` alone: every row's final answer
is its solution's last line after ``#### `` (the dataset's own convention). Arithmetic answers
are checked by evaluating the question's expression independently of the generator.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mcore_grpo.config.schema import ConfigError
from mcore_grpo.grpo.tasks.math_data import (
    ArithmeticSpec,
    arithmetic_items,
    load_items,
    split_items,
    widen_training_pool,
)

GSM8K = Path(__file__).resolve().parents[4].parent / "shared" / "data" / "gsm8k"
needs_gsm8k = pytest.mark.skipif(
    not (GSM8K / "test.jsonl").is_file(), reason=f"GSM8K not at {GSM8K} (../shared/data/gsm8k)"
)


def test_arithmetic_answers_are_the_questions_values_and_the_draw_is_seeded() -> None:
    spec = ArithmeticSpec(digits=2, operations=("+", "-", "*"), terms=3)
    items = arithmetic_items(spec, 300, seed=3)
    assert len({i.question for i in items}) == 300
    for item in items:
        expression = re.fullmatch(r"What is (.*)\?", item.question)
        assert expression is not None
        operands = [int(t) for t in re.findall(r"\d+", expression.group(1))]
        assert len(operands) == 3 and all(1 <= n <= 99 for n in operands)
        a, op1, b, op2, c = expression.group(1).split()
        value = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__}
        if op2 == "*" and op1 != "*":  # precedence: b * c first
            expected = value[op1](int(a), int(b) * int(c))
        else:
            expected = value[op2](value[op1](int(a), int(b)), int(c))
        assert item.answer == str(expected), item
    assert arithmetic_items(spec, 300, seed=3) == items
    assert arithmetic_items(spec, 300, seed=4) != items


def test_the_digit_knob_bounds_the_operands() -> None:
    for item in arithmetic_items(ArithmeticSpec(digits=1, operations=("+",), terms=2), 50, 0):
        assert all(1 <= int(n) <= 9 for n in re.findall(r"\d+", item.question.split("=")[0]))


def test_asking_for_more_problems_than_exist_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"only 81 distinct problems"):
        arithmetic_items(ArithmeticSpec(digits=1, operations=("+",), terms=2), 200, 0)


def test_bad_knobs_are_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"task.arithmetic.operations=\['/'\]"):
        ArithmeticSpec(operations=("/",))
    with pytest.raises(ConfigError, match=r"task.arithmetic.terms=1"):
        ArithmeticSpec(terms=1)


def test_the_split_is_disjoint_and_seeded() -> None:
    items = arithmetic_items(ArithmeticSpec(), 500, 0)
    train, held = split_items(items, 200, seed=1)
    assert len(held) == 200 and len(train) == 300
    assert not {i.question for i in train} & {i.question for i in held}
    assert split_items(items, 200, seed=1) == (train, held)
    with pytest.raises(ConfigError, match=r"task.eval_size=500"):
        split_items(items, 500, seed=1)


def test_a_wider_pool_adds_training_problems_but_never_a_held_out_one() -> None:
    one_digit = ArithmeticSpec(digits=1, operations=("+", "-", "*"), terms=2)
    train, held = split_items(arithmetic_items(one_digit, 243, 7), 200, seed=7)
    wider_spec = ArithmeticSpec(digits=2, operations=("+", "-", "*"), terms=2)
    pool = arithmetic_items(wider_spec, 3000, 8)
    wider = widen_training_pool(train, held, pool)
    held_questions = {i.question for i in held}
    # The pool draws one-digit problems too; every one of them that is held out is dropped.
    assert {i.question for i in pool} & held_questions
    assert not {i.question for i in wider} & held_questions
    assert wider[: len(train)] == train
    assert len({i.question for i in wider}) == len(wider) > 2700


def test_the_task_keeps_its_held_out_split_when_the_pool_widens() -> None:
    from mcore_grpo.config.loader import load_config
    from mcore_grpo.grpo.tasks.math_task import _items

    base = load_config("cpu-smollm2-arith", None, ["task.arithmetic.train_problems=0"]).task
    wide = load_config(
        "cpu-smollm2-arith",
        None,
        ["task.arithmetic.train_problems=2000", "task.arithmetic.base_share=0"],
    ).task
    train, held = _items(base)
    wide_train, wide_held = _items(wide)
    assert wide_held == held and len(held) == 200 and len(train) == 43
    assert wide_train[:43] == train and len(wide_train) > 1700


def test_a_base_share_repeats_the_split_to_that_share_of_the_draws() -> None:
    one_digit = ArithmeticSpec(digits=1, operations=("+", "-", "*"), terms=2)
    train, held = split_items(arithmetic_items(one_digit, 243, 7), 200, seed=7)
    pool = arithmetic_items(ArithmeticSpec(2, ("+", "-", "*"), 2), 3000, 8)
    plain = widen_training_pool(train, held, pool)
    mixed = widen_training_pool(train, held, pool, base_share=0.5)
    extra = len(plain) - len(train)
    assert mixed[len(mixed) - extra :] == plain[len(train) :]
    base = len(mixed) - extra
    assert base % len(train) == 0 and abs(base / len(mixed) - 0.5) < 0.01
    assert {i.question for i in mixed} == {i.question for i in plain}
    with pytest.raises(ConfigError, match=r"base_share=1.0"):
        widen_training_pool(train, held, pool, base_share=1.0)


@needs_gsm8k
def test_gsm8k_final_answers_are_the_files_own() -> None:
    items = load_items(GSM8K / "test.jsonl", "question", "answer")
    rows = [json.loads(line) for line in (GSM8K / "test.jsonl").read_text().splitlines()]
    assert len(items) == len(rows) == 1319
    for item, row in zip(items, rows, strict=True):
        assert item.question == row["question"].strip()
        last = row["answer"].strip().splitlines()[-1]
        assert last.startswith("#### ")
        assert item.answer == last.removeprefix("#### ").replace(",", "").strip()
    assert items[0].answer == "18"  # Janet's ducks
    assert items[0].source.endswith("test.jsonl:1")


def test_nemo_rl_shape_with_plain_answers(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text(
        json.dumps({"problem": "What is 2+2?", "expected_answer": "4"})
        + "\n\n"
        + json.dumps({"problem": "Half of 10?", "expected_answer": 5})
        + "\n"
    )
    items = load_items(path, "problem", "expected_answer", "plain")
    assert [(i.question, i.answer) for i in items] == [("What is 2+2?", "4"), ("Half of 10?", "5")]
    assert items[1].source == f"{path}:3"


def test_parquet_rows(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow not installed")
    import pyarrow as pa

    path = tmp_path / "rows.parquet"
    pq.write_table(
        pa.table({"question": ["q1", "q2"], "answer": ["x\n#### 1,200", "#### 7"]}), path
    )
    assert [i.answer for i in load_items(path, "question", "answer")] == ["1200", "7"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"question": "q", "answer": "#### 3"}\n{"question": "q2"}\n',
            r"rows.jsonl:2: no answer in field 'answer'",
        ),
        (
            '{"question": "q", "answer": "3"}\n',
            r"rows.jsonl:1: field 'answer' has no final answer line",
        ),
        ('{"question": "q", "answer": "#### 3"}\nnot json\n', r"rows.jsonl:2: not a JSON object"),
        ('["a list"]\n', r"rows.jsonl:1: a JSON list, not an object"),
        ('{"prompt": "q", "answer": "#### 3"}\n', r"rows.jsonl:1: no question in field 'question'"),
    ],
)
def test_bad_rows_are_refused_naming_the_file_and_line(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_items(path, "question", "answer")


def test_a_missing_or_unreadable_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope.jsonl: no such file"):
        load_items(tmp_path / "nope.jsonl", "question", "answer")
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match=r"binary.jsonl: cannot read it as UTF-8 JSONL"):
        load_items(binary, "question", "answer")
