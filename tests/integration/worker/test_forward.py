"""Real-vocab logprobs: padded-vocab ids (>= tokenizer vocab) are outside the distribution the
logprob and training forwards normalise over, as they are outside the sampler's."""

from __future__ import annotations

import pytest
import torch
from mcore_grpo.worker.forward import (
    leading_pads,
    next_token_logprobs,
    real_vocab_logits,
    roll_rows,
)

REAL, PADDED = 6, 8


def _logits_and_ids() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, PADDED, generator=g)
    logits[..., REAL:] = 5.0  # padded ids would dominate an unmasked softmax
    ids = torch.randint(0, REAL, (2, 5), generator=g)
    return logits, ids


def test_logprobs_normalise_over_the_real_vocab_only() -> None:
    logits, ids = _logits_and_ids()
    got = next_token_logprobs(logits, ids, REAL)
    expected = torch.log_softmax(logits[:, :-1, :REAL], dim=-1).gather(-1, ids[:, 1:, None])
    assert torch.allclose(got, expected.squeeze(-1), atol=1e-6)
    # The unmasked (full padded vocab) normaliser differs by far more than the tolerance.
    unmasked = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])
    assert (unmasked.squeeze(-1) - got).abs().min() > 1.0


def test_padded_logits_get_no_gradient_and_do_not_matter() -> None:
    logits, ids = _logits_and_ids()
    logits.requires_grad_(True)
    lp = next_token_logprobs(logits, ids, REAL)
    lp.sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    assert float(logits.grad[..., REAL:].abs().max()) == 0.0
    assert float(logits.grad[..., :REAL].abs().max()) > 0.0
    shifted = logits.detach().clone()
    shifted[..., REAL:] = -3.0
    assert torch.allclose(next_token_logprobs(shifted, ids, REAL), lp.detach(), atol=1e-6)


def test_unpadded_vocab_is_a_plain_log_softmax() -> None:
    logits, ids = _logits_and_ids()
    assert real_vocab_logits(logits, PADDED) is logits
    expected = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])
    assert torch.allclose(next_token_logprobs(logits, ids, PADDED), expected.squeeze(-1))


def test_padded_id_in_the_batch_is_refused() -> None:
    logits, ids = _logits_and_ids()
    ids[1, 3] = REAL
    with pytest.raises(ValueError, match=r"input id 6 >= tokenizer vocab size 6"):
        next_token_logprobs(logits, ids, REAL)


@pytest.mark.parametrize(("vocab", "temperature"), [(PADDED, 1.0), (REAL, 1.0), (REAL, 0.7)])
def test_logprobs_and_their_gradient_equal_log_softmax_then_gather(
    vocab: int, temperature: float
) -> None:
    from mcore_grpo.worker.forward import TargetLogprob

    g = torch.Generator().manual_seed(2)
    # Megatron's logits come transposed from [S, B, V]: strided, as the worker sees them.
    logits = torch.randn(5, 3, PADDED, dtype=torch.float64, generator=g).transpose(0, 1)
    logits.requires_grad_(True)
    ids = torch.randint(0, vocab, (3, 5), generator=g)
    weights = torch.randn(3, 4, dtype=torch.float64, generator=g)
    got = next_token_logprobs(logits, ids, vocab, temperature)
    (got_grad,) = torch.autograd.grad((got * weights).sum(), logits)
    scaled = real_vocab_logits(logits[:, :-1] / temperature, vocab)
    expected = torch.log_softmax(scaled, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    (expected_grad,) = torch.autograd.grad((expected * weights).sum(), logits)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_grad, expected_grad)
    assert torch.autograd.gradcheck(
        lambda x: TargetLogprob.apply(x, ids, vocab, temperature), (logits,)
    )


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_read_through_rows_share_a_row_and_its_gradient(temperature: float) -> None:
    """`rows`: several predictions read from one logits row (a shared prompt's last token
    predicts every sample's first token); values and gradient as gathering the rows first."""
    from mcore_grpo.worker.forward import TargetLogprob

    g = torch.Generator().manual_seed(3)
    logits = torch.randn(4, PADDED, dtype=torch.float64, generator=g, requires_grad=True)
    rows = torch.tensor([0, 2, 2, 2, 3, 1])
    targets = torch.randint(0, REAL, (6,), generator=g)
    weights = torch.randn(6, dtype=torch.float64, generator=g)
    got = TargetLogprob.apply(logits, targets, REAL, temperature, rows)
    (got_grad,) = torch.autograd.grad((got * weights).sum(), logits)
    expected = TargetLogprob.apply(logits[rows], targets, REAL, temperature)
    (expected_grad,) = torch.autograd.grad((expected * weights).sum(), logits)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_grad, expected_grad)
    assert torch.autograd.gradcheck(
        lambda x: TargetLogprob.apply(x, targets, REAL, temperature, rows), (logits,)
    )


def test_chunked_logsumexp_equals_the_whole_batch_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The logprob forward's logsumexp, a slab of rows at a time (its temporary is one slab's,
    not the batch's logits again), gives torch.logsumexp's values over the sliced real vocab."""
    from mcore_grpo.worker import forward

    monkeypatch.setattr(forward, "LSE_CHUNK_ELEMENTS", 3 * 5 * 7)  # 5 x 3 x 16: 2 rows a slab
    logits = torch.randn(5, 3, 16, dtype=torch.float64)
    real = logits[..., :13]  # padded vocab: a non-contiguous view, as in TargetLogprob
    for scale in (1.0, 1 / 0.7):
        expected = torch.logsumexp(real * scale, dim=-1)
        assert torch.equal(forward.chunked_logsumexp(real, scale), expected)


def test_rows_left_align_by_their_leading_pads_and_back() -> None:
    valid = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [0, 1, 1, 1, 0]])
    shifts = leading_pads(valid)
    assert shifts.tolist() == [2, 0, 0, 1]
    ids = torch.arange(20).view(4, 5)
    aligned = roll_rows(ids, shifts)
    assert aligned.tolist() == [
        [2, 3, 4, 0, 1],
        [5, 6, 7, 8, 9],
        [10, 11, 12, 13, 14],
        [16, 17, 18, 19, 15],
    ]
    assert roll_rows(valid, shifts)[:, 0].tolist() == [1, 1, 0, 1]  # real tokens first
    logits = torch.randn(4, 5, 3)
    assert torch.equal(roll_rows(roll_rows(logits, shifts), -shifts), logits)
