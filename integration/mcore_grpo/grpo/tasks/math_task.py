"""Math tasks for a real pretrained model: its tokenizer and chat template, NeMo-RL's prompt and
verifier, a seeded train split and a disjoint held-out eval split.

``task.name``: ``arithmetic`` (problems generated in code, `math_data.ArithmeticSpec`) or
``math-dataset`` (a local JSONL/Parquet file, GSM8K by default: ``task.dataset.*``). Prompts are
rendered once, at construction, by NeMo-RL's `math_hf_data_processor` with the policy's
tokenizer; rewards are NeMo-RL's verifier (``task.math_verify_impl``: ``hf_math_verify`` or
``dapo_math_verify``) on the decoded response (`mcore_grpo.grpo.tasks.nemo_rl_math`). Prompts longer
than ``task.max_prompt_tokens`` are left out (and counted in the log), as NeMo-RL masks them
out of its loss.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcore_grpo.config.schema import ConfigError, RunConfig
from mcore_grpo.config.task import MATH_TASKS, TaskSection
from mcore_grpo.grpo.tasks.math_data import (
    ArithmeticSpec,
    MathItem,
    arithmetic_items,
    load_items,
    split_items,
    widen_training_pool,
)
from mcore_grpo.grpo.tasks.nemo_rl_math import MathVerifier, render_prompt, task_data_spec
from mcore_grpo.grpo.tasks.task import Task, build_task

log = logging.getLogger("mcore_grpo")

ARITHMETIC, MATH_DATASET = MATH_TASKS


@dataclass(frozen=True)
class MathProblem:
    """One rendered problem: the prompt's token ids, the ground truth, the question text."""

    prompt_ids: tuple[int, ...]
    answer: str
    text: str  # the rendered prompt (chat template applied)
    question: str  # the problem as the dataset gives it


def load_tokenizer(model_dir: str) -> Any:
    """The policy checkpoint's own tokenizer (chat template included); a pad token set to
    its eos where it has none, as NeMo-RL's `get_tokenizer` does."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            f"policy.model_name={model_dir}: a math task needs the checkpoint's tokenizer with a "
            "chat template (tokenizer_config.json / chat_template.jinja); this one has none"
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _items(cfg: TaskSection) -> tuple[list[MathItem], list[MathItem]]:
    """(train, eval) items of the configured source."""
    if cfg.name == ARITHMETIC:
        a = cfg.arithmetic
        spec = ArithmeticSpec(a.digits, tuple(a.operations), a.terms)
        items = arithmetic_items(spec, a.num_problems, a.seed)
        train, held = split_items(items, cfg.eval_size, a.seed)
        if a.train_problems:
            wider = ArithmeticSpec(a.train_digits, tuple(a.operations), a.terms)
            pool = arithmetic_items(wider, a.train_problems, a.seed + 1)
            train = widen_training_pool(train, held, pool, a.base_share)
        return train, held
    d = cfg.dataset
    train = load_items(Path(d.train_path), d.question_key, d.answer_key, d.answer_format)
    if not d.eval_path:
        return split_items(train, cfg.eval_size, d.seed)
    held = load_items(Path(d.eval_path), d.question_key, d.answer_key, d.answer_format)
    seen = {item.question for item in held}
    train = [item for item in train if item.question not in seen]
    if cfg.eval_size and cfg.eval_size < len(held):
        held = random.Random(f"eval:{d.seed}").sample(held, cfg.eval_size)
    return train, held


class MathTask:
    """A math task in the loop's task interface (`mcore_grpo.grpo.tasks.task.Task`)."""

    def __init__(self, cfg: TaskSection, model_dir: str, max_seq_length: int) -> None:
        self.name = cfg.name
        self.verify_impl = cfg.math_verify_impl
        self.tokenizer = load_tokenizer(model_dir)
        self.vocab_size = len(self.tokenizer)
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.eos_id = int(self.tokenizer.eos_token_id)
        self.max_response_tokens = 0  # no fixed answer width (see position_accuracy)
        spec = task_data_spec(cfg.name, cfg.prompt_file, cfg.system_prompt_file)
        self.spec = spec  # NeMo-RL's TaskDataSpec (the nemo-rl driver's dataloader reuses it)
        train_items, eval_items = _items(cfg)
        self.train = self._render(train_items, spec, cfg.max_prompt_tokens, max_seq_length)
        self.eval = self._render(eval_items, spec, cfg.max_prompt_tokens, max_seq_length)
        if not self.train or not self.eval:
            raise ConfigError(
                f"task {cfg.name}: no problem fits task.max_prompt_tokens="
                f"{cfg.max_prompt_tokens} ({len(self.train)} train, {len(self.eval)} eval)"
            )
        self.max_prompt_tokens = max(len(p.prompt_ids) for p in self.train + self.eval)
        self._verifier: MathVerifier | None = None

    def _render(
        self, items: list[MathItem], spec: Any, limit: int, max_seq_length: int
    ) -> list[MathProblem]:
        problems = []
        for item in items:
            ids, text = render_prompt(
                item.question, item.answer, spec, self.tokenizer, max_seq_length
            )
            if len(ids) <= limit:
                problems.append(MathProblem(tuple(ids), item.answer, text, item.question))
        if len(problems) < len(items):
            log.info(
                "mcore-grpo: task %s: %d of %d prompts longer than task.max_prompt_tokens=%d "
                "left out",
                self.name,
                len(items) - len(problems),
                len(items),
                limit,
            )
        return problems

    @property
    def verifier(self) -> MathVerifier:
        """NeMo-RL's verifier, built on first use (its import takes seconds)."""
        if self._verifier is None:
            self._verifier = MathVerifier(self.verify_impl)
        return self._verifier

    def all_problems(self) -> list[MathProblem]:
        """The training split."""
        return self.train

    def sample_problems(self, n: int, seed: int, step: int) -> list[MathProblem]:
        """`n` training problems drawn with replacement, a pure function of (seed, step)."""
        rng = random.Random(f"{self.name}:{seed}:{step}")
        return [rng.choice(self.train) for _ in range(n)]

    def response_text(self, response_ids: Sequence[int]) -> str:
        """The response as text, special tokens (the end-of-turn token) dropped."""
        return self.tokenizer.decode(list(response_ids), skip_special_tokens=True)

    def rewards(self, responses: Sequence[Sequence[int]], problems: Sequence[Any]) -> list[float]:
        """NeMo-RL's verifier score of each response against its problem's answer."""
        texts = [self.response_text(r) for r in responses]
        return self.verifier.scores(texts, [p.answer for p in problems])

    def reward(self, response_ids: Sequence[int], problem: Any) -> float:
        """`rewards` of one response."""
        return self.rewards([response_ids], [problem])[0]

    def position_accuracy(
        self, responses: Sequence[Sequence[int]], problems: Sequence[Any]
    ) -> list[float]:
        """Empty: a free-form answer has no per-position target."""
        return []

    def decode(self, ids: Sequence[int]) -> str:
        """Readable text of token ids (special tokens kept, for logs)."""
        return self.tokenizer.decode(list(ids))


def make_task(config: RunConfig) -> Task:
    """The run's task: a math task on the (resolved) policy checkpoint, or a built-in one."""
    t = config.task
    if t.name in MATH_TASKS:
        return MathTask(t, config.policy.model_name, config.policy.max_total_sequence_length)
    return build_task(t.name, t.max_addend, t.num_terms)
