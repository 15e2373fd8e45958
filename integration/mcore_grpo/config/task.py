"""``task.*``: the verifiable task and its data."""

from __future__ import annotations

from dataclasses import dataclass, field

# task.name of the real-model math tasks (mcore_grpo.grpo.tasks.math_task): the checkpoint's tokenizer.
MATH_TASKS = ("arithmetic", "math-dataset")
# NeMo-RL's `MathEnvironment` verifiers (``env.math.math_verify_impl`` in its configs).
MATH_VERIFY_IMPLS = ("hf_math_verify", "dapo_math_verify")


@dataclass
class ArithmeticSection:
    """``task.arithmetic.*``: the generated arithmetic problems' difficulty knob
    (`mcore_grpo.grpo.tasks.math_data.ArithmeticSpec`) and how many distinct problems to draw."""

    digits: int = 1
    operations: list[str] = field(default_factory=lambda: ["+", "*"])
    terms: int = 3
    num_problems: int = 2000
    seed: int = 7
    # A wider training pool: `train_problems` more distinct problems with operands of 1 to
    # `train_digits` digits, held-out questions removed (0: only what the split leaves).
    train_digits: int = 2
    train_problems: int = 0
    base_share: float = 0.0  # with a wider pool: the split's share of draws (math_data)


@dataclass
class DatasetSection:
    """``task.dataset.*``: a local JSONL/Parquet math dataset (GSM8K's shape by default;
    NeMo-RL's ``problem``/``expected_answer`` with answer_format=plain)."""

    train_path: str = "../shared/data/gsm8k/train.jsonl"
    # None: the eval split is task.eval_size rows held out of train_path.
    eval_path: str | None = "../shared/data/gsm8k/test.jsonl"
    question_key: str = "question"
    answer_key: str = "answer"
    answer_format: str = "gsm8k"  # or "plain"
    seed: int = 7


@dataclass
class TaskSection:
    """``task.*``: the verifiable task (see `mcore_grpo.grpo.tasks.task` and, for a real model's
    math tasks ``arithmetic`` / ``math-dataset``, `mcore_grpo.grpo.tasks.math_task`)."""

    name: str = "digit-add"
    max_addend: int = 1
    # count-on only: how many terms the answer has (the response is num_terms + 1 tokens).
    num_terms: int = 20
    # Math tasks: held-out problems (0 with an eval_path: all of it), prompts longer than
    # max_prompt_tokens left out, NeMo-RL's prompt files (None: examples/prompts/cot.txt).
    eval_size: int = 200
    max_prompt_tokens: int = 256
    prompt_file: str | None = None
    system_prompt_file: str | None = None
    # NeMo-RL's key (env.math.math_verify_impl): hf_math_verify (its default: math-verify on
    # the whole response, boxed or plain expressions; arithmetic left undone, e.g. a restated
    # question, is not graded when the ground truth is a number: the series' NeMo-RL patch
    # math-verify-graded-by-stated-answer) or dapo_math_verify (Minerva's last "Answer: X"
    # line, compared after normalisation), see docs/real-model.md.
    math_verify_impl: str = "hf_math_verify"
    arithmetic: ArithmeticSection = field(default_factory=ArithmeticSection)
    dataset: DatasetSection = field(default_factory=DatasetSection)
