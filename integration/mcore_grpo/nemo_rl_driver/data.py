"""The task's prompts through NeMo-RL's dataloader: raw rows -> `DatumSpec` -> batches.

The rows are the prompts our own loop draws (`DigitAddTask.sample_problems(n, seed, step)`
for steps 1..max_num_steps, in order), so with ``shuffle=False`` NeMo-RL's dataloader hands
`grpo_train` step k exactly the prompts `mcore_grpo.grpo.driver.loop.GRPOLoop` uses at step k: the
two drivers see the same data. NeMo-RL's `AllTaskProcessedDataset` runs `process_datum` (a
`TaskDataProcessFnCallable`) per row and checks the first prompt for a double BOS;
`rl_collate_fn` batches them in a `StatefulDataLoader`, as NeMo-RL's `setup()` builds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch

from mcore_grpo.grpo.nemo_rl.source import require_nemo_rl
from mcore_grpo.grpo.tasks.math_task import MathTask
from mcore_grpo.grpo.tasks.task import DigitAddTask, Problem

if TYPE_CHECKING:
    from nemo_rl.data.interfaces import DatumSpec, TaskDataProcessFnCallable, TaskDataSpec
    from transformers import PreTrainedTokenizerBase


def problem_rows(task: DigitAddTask, num_prompts: int, seed: int, steps: int) -> list[dict]:
    """One raw row per prompt, step 1's prompts first (our loop's draw, step by step)."""
    rows = []
    for step in range(1, steps + 1):
        for problem in task.sample_problems(num_prompts, seed, step):
            rows.append(
                {
                    "task_name": task.name,
                    "prompt_text": problem.text,
                    "prompt_ids": list(problem.prompt_ids),
                    "answer": problem.answer,
                }
            )
    return rows


def row_problem(row: dict[str, Any]) -> Problem:
    """The `Problem` a raw row (or an environment's metadata) describes."""
    return Problem(
        prompt_ids=tuple(row["prompt_ids"]), answer=int(row["answer"]), text=row["prompt_text"]
    )


def process_datum(
    datum_dict: dict[str, Any],
    task_data_spec: TaskDataSpec,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int | None,
    idx: int,
) -> DatumSpec:
    """NeMo-RL `TaskDataProcessFnCallable`: a raw row -> `DatumSpec` (no chat template).

    The prompt is tokenized with the task tokenizer and must equal the task's own ids (the
    tokenizer wrapper and the task cannot drift apart silently).
    """
    ids = tokenizer(datum_dict["prompt_text"], add_special_tokens=False).input_ids
    if list(ids) != list(datum_dict["prompt_ids"]):
        raise ValueError(
            f"prompt {datum_dict['prompt_text']!r}: tokenizer gives {ids}, the task "
            f"{datum_dict['prompt_ids']}; the NeMo-RL tokenizer wrapper and the task disagree"
        )
    if max_seq_length is not None and len(ids) > max_seq_length:
        raise ValueError(f"prompt of {len(ids)} tokens exceeds max_seq_length={max_seq_length}")
    return {
        "message_log": [
            {
                "role": "user",
                "content": datum_dict["prompt_text"],
                "token_ids": torch.tensor(ids, dtype=torch.long),
            }
        ],
        "length": len(ids),
        "extra_env_info": {
            "prompt_text": datum_dict["prompt_text"],
            "prompt_ids": list(datum_dict["prompt_ids"]),
            "answer": datum_dict["answer"],
        },
        "loss_multiplier": 1.0,
        "idx": idx,
        "task_name": datum_dict["task_name"],
    }


def in_order_loader(dataset: Any, num_prompts: int) -> Any:
    """`dataset` in NeMo-RL's `StatefulDataLoader` with its `rl_collate_fn`, as its `setup()`
    builds it, but in order (no shuffle): batch k holds our loop's step-k prompts."""
    from nemo_rl.data.collate_fn import rl_collate_fn
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(
        dataset,
        batch_size=num_prompts,
        shuffle=False,
        collate_fn=rl_collate_fn,
        drop_last=True,
        num_workers=0,
    )


def build_dataloader(
    task: DigitAddTask,
    tokenizer: Any,
    *,
    num_prompts: int,
    seed: int,
    steps: int,
    max_seq_length: int,
) -> Any:
    """NeMo-RL's `AllTaskProcessedDataset` in a `StatefulDataLoader`, as `setup()` builds it."""
    require_nemo_rl()
    from nemo_rl.data.datasets import AllTaskProcessedDataset
    from nemo_rl.data.interfaces import TaskDataSpec

    dataset = AllTaskProcessedDataset(
        problem_rows(task, num_prompts, seed, steps),
        tokenizer,
        TaskDataSpec(task_name=task.name),
        process_datum,
        max_seq_length=max_seq_length,
    )
    return in_order_loader(dataset, num_prompts)


# The task name NeMo-RL's math recipes give their rows, and the environment that scores them.
MATH_ENV = "math"


def math_rows(task: MathTask, num_prompts: int, seed: int, steps: int) -> list[dict]:
    """Raw rows in the shape NeMo-RL's `math_hf_data_processor` reads (question, answer),
    step 1's prompts first: the problems our loop draws, step by step."""
    return [
        {
            "messages": [
                {"role": "user", "content": problem.question},
                {"role": "assistant", "content": problem.answer},
            ],
            "task_name": MATH_ENV,
        }
        for step in range(1, steps + 1)
        for problem in task.sample_problems(num_prompts, seed, step)
    ]


def build_math_dataloader(
    task: MathTask, spec: Any, *, num_prompts: int, seed: int, steps: int, max_seq_length: int
) -> Any:
    """NeMo-RL's `AllTaskProcessedDataset` over `math_rows` with NeMo-RL's own
    `math_hf_data_processor` and prompt spec (`spec`), in a `StatefulDataLoader`."""
    require_nemo_rl()
    from nemo_rl.data.datasets import AllTaskProcessedDataset
    from nemo_rl.data.processors import math_hf_data_processor

    rows = math_rows(task, num_prompts, seed, steps)
    # NeMo-RL's own processor is declared narrower than its protocol (max_seq_length: int).
    processor = cast("TaskDataProcessFnCallable", math_hf_data_processor)
    dataset = AllTaskProcessedDataset(
        rows, task.tokenizer, spec, processor, max_seq_length=max_seq_length
    )
    first_ids = dataset[0]["message_log"][0]["token_ids"]
    assert isinstance(first_ids, torch.Tensor)  # the processor tokenizes to a tensor
    first = first_ids.tolist()
    expected = list(task.sample_problems(num_prompts, seed, 1)[0].prompt_ids)
    if first != expected:
        raise ValueError(
            "NeMo-RL's math_hf_data_processor renders the first prompt differently from the "
            f"task ({len(first)} vs {len(expected)} tokens); the two drivers would not train on "
            "the same prompts"
        )
    return in_order_loader(dataset, num_prompts)
