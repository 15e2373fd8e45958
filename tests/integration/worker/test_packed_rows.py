"""Whole rows forwarded packed (`mcore_grpo.worker.packed_rows`): real tokens only, left-aligned,
no mask at all, against the rows as laid out over a dense causal + key-padding mask (the
oracle, `tests/support/dense_reference.py`): logprobs, every parameter's gradient, the logits in
the rows' layout, and the recompute sampler; and no mask reaching attention on any of them.

Rows are left-padded prompts of different lengths with completions ending at different
columns, one with a hole (a padding column between real tokens); rope / RMSNorm / SwiGLU / GQA
GPT, fp32."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from mcore_grpo.worker.config import ModelConfig, WorkerConfig
from mcore_grpo.worker.forward import next_token_logprobs
from mcore_grpo.worker.logprobs import policy_token_logprobs
from mcore_grpo.worker.model import build_gpt
from mcore_grpo.worker.packed_rows import policy_logits, whole_rows
from mcore_grpo.worker.recompute_sampler import generate_recompute
from mcore_grpo.worker.sampling import SamplingParams

from tests.support.dense_reference import reference_logits

VOCAB = 64
# Per row: (leading pads, real tokens, trailing pads); row 3 gets a hole at its column 6.
ROWS = ((3, 8, 1), (0, 12, 0), (5, 4, 3), (1, 9, 2))
HOLE = (3, 6)


def _config(device: str) -> WorkerConfig:
    return WorkerConfig(
        device=device,  # type: ignore[arg-type]
        model=ModelConfig(
            num_layers=2,
            hidden_size=32,
            num_attention_heads=4,
            num_query_groups=2,
            vocab_size=VOCAB,
            max_sequence_length=64,
            normalization="RMSNorm",
            swiglu=True,
            add_bias_linear=False,
        ),
    )


@pytest.fixture
def model(tp1: None, device: str) -> Iterator[torch.nn.Module]:
    torch.manual_seed(0)
    _, gpt = build_gpt(_config(device))
    gpt.eval()
    yield gpt


def _batch(device: str, hole: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    width = sum(ROWS[0])
    ids = torch.randint(1, VOCAB, (len(ROWS), width), generator=g)
    valid = torch.zeros(len(ROWS), width, dtype=torch.bool)
    for row, (lead, real, _) in enumerate(ROWS):
        valid[row, lead : lead + real] = True
    if hole:
        valid[HOLE] = False
    return ids.to(device), valid.to(device)


def test_whole_rows_pack_real_tokens_left_aligned_without_segments() -> None:
    ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 0, 4, 0]])
    valid = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 0, 1, 0]], dtype=torch.bool)
    packed = whole_rows(ids, valid, multiple=3)
    # as wide as the rows (5), rounded up to a multiple of 3
    assert packed.input_ids.tolist() == [[5, 6, 7, 0, 0, 0], [8, 9, 4, 0, 0, 0]]
    assert packed.positions.tolist() == [[0, 1, 2, 0, 0, 0], [0, 1, 2, 0, 0, 0]]
    assert packed.row.tolist() == [0, 1]
    # 9 -> 4 across the hole is predicted from 9's column, as under the mask
    assert packed.source.tolist() == [[0, 0, 0, 1], [0, 0, 0, 0]]
    assert packed.scored.tolist() == [[False, False, True, True], [True, False, False, False]]
    assert packed.params is None


def _scored(valid: torch.Tensor) -> torch.Tensor:
    return valid[:, :-1] & valid[:, 1:]


@pytest.mark.parametrize("pick", [False, True], ids=["every-position", "scored-only"])
def test_logprobs_and_gradients_equal_the_masked_rows(
    model: torch.nn.Module, device: str, pick: bool
) -> None:
    ids, valid = _batch(device)
    scored = _scored(valid)
    weights = torch.randn(scored.shape, generator=torch.Generator().manual_seed(1)).to(device)
    weights = weights * scored
    config = _config(device)
    got, _ = policy_token_logprobs(model, ids, valid, config, False, scored if pick else None)
    (got * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    expected = next_token_logprobs(reference_logits(model, ids, valid), ids, VOCAB)
    (expected * weights).sum().backward()
    diff = float((got - expected)[scored].abs().max())
    assert diff <= 1e-5, f"max |packed - masked| logprob over scored predictions = {diff}"
    assert float(got[~scored].abs().max()) == 0.0
    worst = max(
        float((grads[n] - p.grad).norm() / p.grad.norm().clamp(min=1e-12))
        for n, p in model.named_parameters()
        if p.grad is not None
    )
    model.zero_grad(set_to_none=True)
    assert len(grads) > 5 and worst <= 1e-5, f"worst relative gradient difference = {worst}"


def test_logits_in_the_rows_layout_equal_the_masked_rows(model: torch.nn.Module, device: str):
    ids, valid = _batch(device)
    with torch.no_grad():
        got, expected = policy_logits(model, ids, valid), reference_logits(model, ids, valid)
    assert got.shape == expected.shape
    diff = float((got - expected)[valid].abs().max())
    assert diff <= 1e-5, f"max |packed - masked| logit at real columns = {diff}"


@contextmanager
def _attention_calls(model: torch.nn.Module) -> Iterator[list[tuple[Any, Any]]]:
    """Each core attention call's (mask, packed_seq_params)."""
    seen: list[tuple[Any, Any]] = []

    def record(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        mask = args[3] if len(args) > 3 else kwargs.get("attention_mask")
        seen.append((mask, kwargs.get("packed_seq_params")))

    hooks = [
        m.register_forward_pre_hook(record, with_kwargs=True)
        for m in model.modules()
        if type(m).__name__.endswith("DotProductAttention")
    ]
    try:
        yield seen
    finally:
        for hook in hooks:
            hook.remove()


def test_no_mask_reaches_attention_for_whole_rows(model: torch.nn.Module, device: str) -> None:
    ids, valid = _batch(device)
    with _attention_calls(model) as seen, torch.no_grad():
        policy_token_logprobs(model, ids, valid, _config(device), False)
        policy_token_logprobs(model, ids, valid, _config(device), False, _scored(valid))
        policy_logits(model, ids, valid)
    assert seen and all(mask is None and params is None for mask, params in seen)


def test_recompute_generation_takes_no_mask_and_scores_as_the_masked_rows(
    model: torch.nn.Module, device: str
) -> None:
    """The recompute sampler forwards its growing rows packed, with no mask: its greedy
    tokens' logprobs equal the masked rows' scores of the same tokens."""
    ids, valid = _batch(device, hole=False)
    prompts, mask = ids[:, :9], valid[:, :9].clone()
    mask[:, -1] = True  # prompts end at the same column, left-padded
    params = SamplingParams(max_new_tokens=4, greedy=True, backend="recompute")
    with _attention_calls(model) as seen:
        out = generate_recompute(model, prompts, mask.long(), params, VOCAB)
    assert seen and all(m is None and p is None for m, p in seen)
    with torch.no_grad():
        logits = reference_logits(model, out.output_ids, out.attention_mask.bool())
    scored = next_token_logprobs(logits, out.output_ids, VOCAB)
    generated = out.generated_mask[:, 1:].bool()
    diff = float((scored - out.logprobs[:, 1:])[generated].abs().max())
    assert diff <= 1e-5, f"max |recompute - masked| logprob of the generated tokens = {diff}"
