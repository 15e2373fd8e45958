"""The built-in task as NeMo-RL's `EnvironmentInterface` (a Ray actor, as NeMo-RL's envs are).

NeMo-RL's rollout hands `step` the message logs' role/content only (text, no ids); the task
reward is a function of the sampled ids, so the assistant's content is re-encoded with the
task tokenizer (word level: exact, special tokens kept by `TaskTokenizer.decode`). Each
episode is one turn: every step terminates, with an empty observation (no tokens appended).
"""

from __future__ import annotations

from typing import Any

import torch

from mcore_grpo.grpo.nemo_rl.source import require_nemo_rl
from mcore_grpo.grpo.tasks.task import build_task, build_tokenizer
from mcore_grpo.nemo_rl_driver.data import row_problem

require_nemo_rl()

from nemo_rl.distributed.batched_data_dict import BatchedDataDict  # noqa: E402
from nemo_rl.environments.interfaces import (  # noqa: E402
    EnvironmentInterface,
    EnvironmentReturn,
)


def response_ids(message_log: list[dict[str, Any]]) -> list[int]:
    """Token ids of the last assistant message's text (the task tokenizer, word level)."""
    content = next(m["content"] for m in reversed(message_log) if m["role"] == "assistant")
    return build_tokenizer().encode(content).ids if content else []


class TaskEnvironment(EnvironmentInterface):
    """`task.reward` of each response; `accuracy` = the share of exact (1.0) answers."""

    def __init__(self, task_name: str, max_addend: int = 1, num_terms: int = 20) -> None:
        self.task = build_task(task_name, max_addend, num_terms)

    def step(
        self, message_log_batch: list[list[dict[str, Any]]], metadata: list[dict[str, Any]]
    ) -> EnvironmentReturn:
        """Score every response; each episode ends here."""
        rewards = [
            self.task.reward(response_ids(log), row_problem(meta))
            for log, meta in zip(message_log_batch, metadata, strict=True)
        ]
        n = len(rewards)
        return EnvironmentReturn(
            observations=[{"role": "environment", "content": ""}] * n,
            metadata=[None] * n,
            next_stop_strings=[None] * n,
            rewards=torch.tensor(rewards, dtype=torch.float32),
            terminateds=torch.ones(n, dtype=torch.bool),
            answers=None,
        )

    def global_post_process_and_metrics(
        self, batch: BatchedDataDict
    ) -> tuple[BatchedDataDict, dict[str, float]]:
        """Accuracy over the batch (validation only; `grpo_train` logs `reward` itself)."""
        rewards = batch["total_reward"]
        return batch, {"accuracy": float((rewards == 1.0).float().mean())}


def start_environment(task_name: str, max_addend: int, num_terms: int) -> Any:
    """The environment as a Ray actor (NeMo-RL's rollout calls ``env.step.remote``)."""
    import ray

    actor = ray.remote(num_cpus=0)(TaskEnvironment)
    return actor.remote(task_name, max_addend, num_terms)  # type: ignore[attr-defined]


def start_math_environment(math_verify_impl: str) -> Any:
    """NeMo-RL's own `MathEnvironment` actor, made by its `create_env` as its math recipes do
    (one verifier worker, `math_verify_impl` as its ``env.math`` config names it)."""
    from nemo_rl.environments.utils import create_env

    return create_env("math", {"num_workers": 1, "math_verify_impl": math_verify_impl})
