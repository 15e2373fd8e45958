"""The task's word-level tokenizer as the Hugging Face tokenizer NeMo-RL's code expects.

NeMo-RL's dataloader checks prompts with ``PreTrainedTokenizerBase`` methods, its rollouts
decode responses with ``batch_decode(..., skip_special_tokens=True)`` and tokenize
environment observations with ``tokenizer(text, return_tensors="pt")``. The reward of the
built-in tasks depends on the stop token (``8 <eos>`` scores 1.0, ``8 <pad>`` 0.5), so this
tokenizer's decode always keeps special tokens: the environment sees what was sampled.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerFast

from mcore_grpo.grpo.tasks.task import BOS, EOS, PAD, build_tokenizer


class TaskTokenizer(PreTrainedTokenizerFast):
    """`mcore_grpo.grpo.tasks.task.build_tokenizer` with pad/bos/eos set; decode keeps specials."""

    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> Any:
        """Text of `token_ids`, special tokens included whatever the caller asks (see module)."""
        kwargs.pop("skip_special_tokens", None)
        return super().decode(token_ids, skip_special_tokens=False, **kwargs)

    def batch_decode(
        self,
        sequences: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """`decode` of each sequence."""
        return [
            self.decode(seq, clean_up_tokenization_spaces=clean_up_tokenization_spaces, **kwargs)
            for seq in sequences
        ]


def task_tokenizer() -> TaskTokenizer:
    """The tokenizer of the built-in tasks (same ids as `build_tokenizer`)."""
    return TaskTokenizer(
        tokenizer_object=build_tokenizer(), pad_token=PAD, bos_token=BOS, eos_token=EOS
    )
