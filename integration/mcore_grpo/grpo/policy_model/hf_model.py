"""`policy.model_name` when it is a Hugging Face model: made local, checked against the task.

``tiny-hf-qwen2`` / ``tiny-hf-qwen3`` (preset ``cpu-hf-tiny``) name a tiny random checkpoint
this module writes once under the run's output directory, with the task's tokenizer saved
beside the weights: a real HF checkpoint that Megatron-Bridge converts and exports, made
without a download. Any other name but ``tiny-gpt`` is a checkpoint directory or Hub id.

``smollm2-135m-instruct``, a ``.gguf`` file, a missing path or an unreachable Hub id:
`mcore_grpo.grpo.policy_model.pretrained`. The math tasks (``arithmetic``, ``math-dataset``) speak the
checkpoint's own tokenizer. The built-in tasks speak their own 15-symbol vocabulary, so a checkpoint whose tokenizer
gives the task's symbols other ids cannot learn them: refused here, in one line, before a
worker starts. Every process of the run is given the resolved path (the driver resolves it
once, so ranks never race to write it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from mcore_grpo.config.schema import ConfigError, RunConfig
from mcore_grpo.config.task import MATH_TASKS
from mcore_grpo.grpo.policy_model.pretrained import resolve_pretrained
from mcore_grpo.grpo.tasks.task import BOS, EOS, PAD, SYMBOLS, build_tokenizer
from mcore_grpo.run_output import upstream_output

TINY_GPT = "tiny-gpt"
TINY_HF_PREFIX = "tiny-hf-"


def is_hf_model(model_name: str) -> bool:
    """Whether the run's policy comes from a Hugging Face checkpoint (converted by Bridge)."""
    return model_name != TINY_GPT


def task_hf_tokenizer() -> Any:
    """The task's tokenizer as a plain `PreTrainedTokenizerFast` (loadable by `AutoTokenizer`)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer(), pad_token=PAD, bos_token=BOS, eos_token=EOS
    )


def resolve_model(config: RunConfig, output_dir: Path) -> RunConfig:
    """`config` with a ``tiny-hf-*`` model written (once) and named by its absolute path; an
    HF model's tokenizer, where it has one, checked against the task's ids."""
    name = config.policy.model_name
    if not is_hf_model(name):
        return config
    if name.startswith(TINY_HF_PREFIX):
        name = str(_tiny_checkpoint(name, output_dir, config.grpo.seed))
    else:
        name = resolve_pretrained(name)
    if config.task.name not in MATH_TASKS:
        _check_tokenizer(name)
    policy = dataclasses.replace(config.policy, model_name=name)
    return dataclasses.replace(config, policy=policy)


def _tiny_checkpoint(name: str, output_dir: Path, seed: int) -> Path:
    from mcore_grpo.worker.tiny_hf_checkpoint import ARCHS, write_tiny_checkpoint

    arch = name.removeprefix(TINY_HF_PREFIX)
    if arch not in ARCHS:
        known = ", ".join(TINY_HF_PREFIX + a for a in ARCHS)
        raise ConfigError(f"policy.model_name={name!r}: the tiny HF models are {known}")
    path = (output_dir / name).resolve()
    if not (path / "config.json").is_file():
        with upstream_output():  # transformers' "Writing model shards" bar: held back
            write_tiny_checkpoint(path, arch, seed=seed, tokenizer=task_hf_tokenizer())  # type: ignore[arg-type]
    return path


def _check_tokenizer(source: str) -> None:
    """A local checkpoint's tokenizer must give the task's symbols the task's ids."""
    path = Path(source)
    if not (path / "tokenizer_config.json").is_file():
        return
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer is None:
        raise ConfigError(f"policy.model_name={source}: transformers found no tokenizer in {path}")
    wrong = [
        f"{s!r} -> {tokenizer.convert_tokens_to_ids(s)}"
        for i, s in enumerate(SYMBOLS)
        if tokenizer.convert_tokens_to_ids(s) != i
    ]
    if wrong:
        raise ConfigError(
            f"policy.model_name={source}: its tokenizer does not speak the built-in task's "
            f"vocabulary ({', '.join(wrong[:4])}; the task needs {SYMBOLS[0]!r} -> 0 ... "
            f"{SYMBOLS[-1]!r} -> {len(SYMBOLS) - 1}); use a tiny-hf-* model or a checkpoint "
            "saved with the task tokenizer"
        )
