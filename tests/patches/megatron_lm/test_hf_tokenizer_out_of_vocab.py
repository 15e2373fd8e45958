"""Tripwire for patches/Megatron-LM/hf-tokenizer-out-of-vocab-ids.patch.

Megatron pads the model vocabulary beyond the Hugging Face tokenizer's, so generated ids can
be >= the tokenizer's vocab size; `HuggingFaceTokenizer.ids_to_text` must return the text of
the valid ids instead of failing on the `None` tokens such ids map to. The tokenizer is a
byte-level BPE trained here, so no hub or network access is needed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

_CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "megatron pads the vocabulary so that it divides evenly across ranks",
    "a tokenizer maps text to ids and ids back to text",
] * 20


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny byte-level BPE tokenizer saved in Hugging Face format."""
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        _CORPUS, vocab_size=300, min_frequency=1, special_tokens=["<|endoftext|>"]
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    out = tmp_path_factory.mktemp("bpe")
    fast.save_pretrained(str(out))
    return out


@pytest.mark.parametrize("remove_special_tokens", [True, False])
def test_ids_to_text_drops_out_of_vocab_ids(
    tokenizer_dir: Path, remove_special_tokens: bool
) -> None:
    from megatron.core.tokenizers.text.libraries.huggingface_tokenizer import (
        HuggingFaceTokenizer,
    )

    tok = HuggingFaceTokenizer(str(tokenizer_dir), use_fast=True)
    text = "the lazy dog"
    ids = tok.text_to_ids(text)
    assert tok.tokenizer is not None
    vocab_size = len(tok.tokenizer)
    assert ids and max(ids) < vocab_size
    # Ids from the padded part of the model vocabulary, as a sampler can produce them.
    padded = [vocab_size, vocab_size + 7]

    result = tok.ids_to_text(ids + padded, remove_special_tokens=remove_special_tokens)

    assert result == tok.ids_to_text(ids, remove_special_tokens=remove_special_tokens)
    assert result.strip() == text
