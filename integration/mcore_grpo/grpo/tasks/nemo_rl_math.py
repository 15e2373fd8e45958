"""NeMo-RL's own math pieces, imported from the checkout (never re-implemented): the prompt its
math data processor renders and the verifier its math environment scores with.

- `render_prompt`: NeMo-RL's `math_hf_data_processor` (nemo_rl/data/processors.py) on a
  ``{"messages": [question, answer]}`` row with a `TaskDataSpec` of NeMo-RL's prompt file
  (``examples/prompts/cot.txt`` by default, the GRPO math recipes' prompt): the model's own chat
  template, the generation prompt appended, no extra special tokens; its token ids.
- `MathVerifier`: the class under NeMo-RL's Ray actor ``HFVerifyWorker``
  (nemo_rl/environments/math_environment.py), called in-process with its ``math_verify_impl``:
  ``hf_math_verify`` (its `MathEnvironment`'s default: the gold answer as ``\\boxed{...}``,
  math-verify's LaTeX and expression extraction on the whole response; arithmetic left undone,
  such as a restated question, is not graded when the ground truth is a number: the series'
  patches/NeMo-RL/math-verify-graded-by-stated-answer.patch) or
  ``dapo_math_verify`` (the last ``Answer: X`` line of the response's last 300 characters,
  normalised, equal to the ground truth); 1.0 or 0.0.

Prompt files are looked up as given, then under this project's ``presets/prompts/``, then in
the NeMo-RL checkout (its ``examples/prompts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import torch

from mcore_grpo.grpo.nemo_rl.source import require_nemo_rl, source_root

DEFAULT_PROMPT_FILE = "examples/prompts/cot.txt"
PRESETS_DIR = Path(__file__).resolve().parents[2] / "presets"


def prompt_file(name: str | None) -> Path:
    """A prompt file: a path, one under this project's presets (``prompts/...``), or one
    relative to the NeMo-RL checkout (``examples/prompts/...``)."""
    chosen = Path(name or DEFAULT_PROMPT_FILE)
    if chosen.is_absolute() or chosen.exists():
        return chosen
    ours = PRESETS_DIR / chosen
    return ours if ours.exists() else source_root() / chosen


def task_data_spec(task_name: str, prompt: str | None, system_prompt: str | None) -> Any:
    """NeMo-RL's `TaskDataSpec` with its prompt (and optional system prompt) files loaded."""
    require_nemo_rl()
    from nemo_rl.data.interfaces import TaskDataSpec

    return TaskDataSpec(
        task_name=task_name,
        prompt_file=str(prompt_file(prompt)),
        system_prompt_file=str(prompt_file(system_prompt)) if system_prompt else None,
    )


def render_prompt(
    question: str, answer: str, spec: Any, tokenizer: Any, max_seq_length: int
) -> tuple[list[int], str]:
    """(token ids, text) of `question` as NeMo-RL's math data processor renders it."""
    require_nemo_rl()
    from nemo_rl.data.processors import math_hf_data_processor

    datum = {
        "messages": [
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer},
        ],
        "task_name": spec.task_name,
    }
    out = math_hf_data_processor(datum, spec, tokenizer, max_seq_length, 0)
    message = out["message_log"][0]
    token_ids = message["token_ids"]
    assert isinstance(token_ids, torch.Tensor)  # the processor tokenizes to a tensor
    return [int(t) for t in token_ids.tolist()], str(message["content"])


class MathVerifier:
    """NeMo-RL's ``HFVerifyWorker.verify`` in this process (its Ray actor's own class)."""

    def __init__(self, impl: str) -> None:
        self.impl = impl
        require_nemo_rl()
        from nemo_rl.environments.math_environment import HFVerifyWorker

        # ray.remote keeps the decorated class here; NeMo-RL's environment runs this class.
        self._worker = cast(Any, HFVerifyWorker).__ray_metadata__.modified_class()

    def scores(self, responses: Sequence[str], answers: Sequence[str]) -> list[float]:
        """1.0 where a response's final answer equals the ground truth, else 0.0."""
        return list(self._worker.verify(list(responses), list(answers), math_verify_impl=self.impl))
