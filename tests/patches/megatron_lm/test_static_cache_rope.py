"""Tripwire for patches/Megatron-LM/cache-rotated-keys-in-static-batching-inference.patch.

With rope and a `StaticInferenceContext` (no flash decoding), megatron-core caches the keys
UNrotated and, on every decode step, rotates all `sequence_end` cached keys again
(`Attention._adjust_key_value_for_inference` slices `k_pos_emb[:sequence_end]`, then the
rotary block applies it to the whole cached key tensor): O(sequence) rotary work per
generated token, which at 1,040 cached tokens was 85 % of a decode step of a 4-layer,
hidden-256 model on CPU (benchmarks/bench_generation.py --rope --step-curve). Patched, the
new keys are rotated once and cached rotated (as the flash-decoding path already does), so a
decode step rotates one key per row, with the same logits.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

VOCAB = 64
PROMPT = 6
STEPS = 5


def _tiny_rope_gpt(device: str) -> Any:
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig

    config = TransformerConfig(
        num_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        use_cpu_initialization=device == "cpu",
        params_dtype=torch.float32,
        bf16=False,
        gradient_accumulation_fusion=False,
        apply_rope_fusion=False,
        bias_dropout_fusion=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=VOCAB,
        max_sequence_length=PROMPT + STEPS,
        position_embedding_type="rope",
    )
    return model.to(device).eval()


@pytest.fixture
def rotated_lengths() -> Iterator[list[int]]:
    """Sequence lengths of the keys megatron-core's attention rotates (query calls too)."""
    import megatron.core.transformer.attention as attention

    original = attention.apply_rotary_pos_emb
    lengths: list[int] = []

    def recording(t: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        lengths.append(t.shape[0])
        return original(t, *args, **kwargs)

    attention.apply_rotary_pos_emb = recording  # type: ignore[assignment]
    yield lengths
    attention.apply_rotary_pos_emb = original


def _decode(model: Any, ids: torch.Tensor, lengths: list[int]) -> tuple[torch.Tensor, list[int]]:
    """Greedy static-context decode; (logits of every step, rotated lengths per decode step)."""
    from megatron.core.inference.contexts import StaticInferenceContext
    from megatron.core.inference.utils import InferenceMode

    batch = ids.shape[0]
    context = StaticInferenceContext(batch, PROMPT + STEPS)
    steps: list[torch.Tensor] = []
    per_step: list[int] = []
    with torch.no_grad(), InferenceMode.active():
        positions = torch.arange(PROMPT, device=ids.device)[None].expand(batch, -1)
        logits = model(ids, positions, None, inference_context=context, runtime_gather_output=True)
        context.increment_sequence_len_offset(PROMPT)
        context.enable_decode_mode()
        for step in range(STEPS):
            steps.append(logits[:, -1])
            token = logits[:, -1].argmax(dim=-1, keepdim=True)
            ids = torch.cat([ids, token], dim=1)
            lengths.clear()
            pos = torch.full((batch, 1), PROMPT + step, device=ids.device)
            logits = model(token, pos, None, inference_context=context, runtime_gather_output=True)
            per_step.append(max(lengths))
            context.increment_sequence_len_offset(1)
    return torch.stack(steps, dim=1), per_step


def test_decode_step_rotates_only_the_new_key(
    mcore_device: str, rotated_lengths: list[int]
) -> None:
    torch.manual_seed(0)
    model = _tiny_rope_gpt(mcore_device)
    ids = torch.randint(0, VOCAB, (2, PROMPT), device=mcore_device)
    _, per_step = _decode(model, ids, rotated_lengths)
    # Unpatched: the longest rotated tensor is the whole cache, PROMPT + 1, PROMPT + 2, ...
    assert per_step == [1] * STEPS


def test_cached_decode_logits_equal_full_forwards(
    mcore_device: str, rotated_lengths: list[int]
) -> None:
    """Caching rotated keys changes no value: each decode step's logits equal a full forward
    of the sequence so far (causal, no cache)."""
    torch.manual_seed(0)
    model = _tiny_rope_gpt(mcore_device)
    ids = torch.randint(0, VOCAB, (2, PROMPT), device=mcore_device)
    cached, _ = _decode(model, ids, rotated_lengths)
    seq = ids
    with torch.no_grad():
        for step in range(STEPS):
            n = seq.shape[1]
            positions = torch.arange(n, device=seq.device)[None].expand(seq.shape[0], -1)
            mask = torch.ones(n, n, dtype=torch.bool, device=seq.device).triu(1)[None, None]
            full = model(seq, positions, mask)[:, -1]
            torch.testing.assert_close(cached[:, step], full, rtol=1e-5, atol=1e-5)
            seq = torch.cat([seq, full.argmax(dim=-1, keepdim=True)], dim=1)
