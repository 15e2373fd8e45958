"""mcore_grpo.grpo.algorithm.loss shape contract: `prev_logprobs` is [B, S] aligned with input_ids (what
`get_logprobs` returns), the logprobs the loss differentiates are [B, S-1] next-token."""

from __future__ import annotations

import pytest
import torch
from mcore_grpo.config.loss import ClippedPGLossConfig
from mcore_grpo.grpo.algorithm import loss as grpo_loss
from mcore_grpo.worker.batch import loss_mask
from mcore_grpo.worker.cpu import cpu_device
from mcore_grpo.worker.forward import next_token_logprobs

from tests.integration.worker.harness import SEQ, global_batch, make_worker, tiny_config
from tests.support.dense_reference import reference_logits
from tests.support.device import TEST_DEVICE


def test_batch_from_get_logprobs_is_on_policy(world1: None) -> None:
    """prev_logprobs = get_logprobs(batch): ratio 1 at every trained prediction (the batch's
    token_mask) of a real token from a real token, so each valid token's loss is -advantage,
    and one train step reports exactly that mean. (`get_logprobs` computes only the trained
    predictions and reports 0 elsewhere; no loss counts them.)"""
    worker = make_worker(tiny_config(overlap=False))
    batch = {k: v for k, v in global_batch(rows=4).items() if k != "prev_logprobs"}
    batch["prev_logprobs"] = worker.get_logprobs(batch)
    assert batch["prev_logprobs"].shape == (4, SEQ)
    batch = {k: v.to(worker.config.torch_device) for k, v in batch.items()}
    with cpu_device(TEST_DEVICE), torch.no_grad():
        logits = reference_logits(worker.policy.ddp, batch["input_ids"], batch["attention_mask"])
        logprobs = next_token_logprobs(logits, batch["input_ids"], worker.config.model.vocab_size)
    per_token = grpo_loss.per_token_loss(
        logprobs, batch, grpo_loss.policy_gradient_only(worker.config.loss)
    )
    expected = -batch["advantages"][:, None].expand(4, SEQ - 1)
    valid = batch["attention_mask"].bool()
    real = valid[:, :-1] & valid[:, 1:] & (batch["token_mask"][:, 1:] > 0)
    assert real.any()
    assert torch.allclose(per_token[real], expected[real], atol=1e-5)

    mask = loss_mask(batch)
    mean = float((expected * mask).sum() / mask.sum())
    metrics = worker.train(batch)
    assert metrics["global_loss"] == pytest.approx(mean, abs=1e-5)


def test_prev_logprobs_in_next_token_layout_are_refused() -> None:
    batch = global_batch(rows=2)
    batch["prev_logprobs"] = batch["prev_logprobs"][:, 1:]
    logprobs = torch.zeros(2, SEQ - 1)
    with pytest.raises(ValueError, match=r"prev_logprobs'\] \(2, 9\) must be \[B, S\] = \(2, 10\)"):
        grpo_loss.per_token_loss(
            logprobs, batch, grpo_loss.policy_gradient_only(ClippedPGLossConfig())
        )


def test_logprobs_must_be_next_token() -> None:
    batch = global_batch(rows=2)
    with pytest.raises(ValueError, match=r"logprobs \(2, 10\) must be \[B, S-1\] = \(2, 9\)"):
        grpo_loss.loss_sum(
            torch.zeros(2, SEQ), batch, grpo_loss.policy_gradient_only(ClippedPGLossConfig())
        )
