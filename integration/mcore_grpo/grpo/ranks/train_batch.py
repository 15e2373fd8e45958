"""A rank's `TrainShard` -> the worker's training batch, and the logprob diagnostics of it.

Rows are right-padded to the run's sequence length: prompt + response, response tokens
masked in (`token_mask`), every sample valid (`sample_mask`). Per-token tensors are [B, S]
aligned with ``input_ids``, the layout of `mcore_grpo.worker.batch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mcore_grpo.config.loss import ClippedPGLossConfig
from mcore_grpo.grpo.algorithm.loss import calculate_kl
from mcore_grpo.grpo.ranks.messages import TrainShard
from mcore_grpo.worker.batch import loss_mask


def build_batch(
    prompts: list[list[int]],
    responses: list[list[int]],
    seq_len: int,
    pad_id: int,
    sample_mask: list[float] | None = None,
) -> dict[str, torch.Tensor]:
    """Right-padded [B, seq_len] training rows: prompt + response, response tokens masked in;
    `sample_mask` weights whole rows (None: all 1)."""
    rows = len(prompts)
    input_ids = torch.full((rows, seq_len), pad_id, dtype=torch.long)
    attention = torch.zeros(rows, seq_len, dtype=torch.long)
    token_mask = torch.zeros(rows, seq_len, dtype=torch.long)
    for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        ids = prompt + response
        if len(ids) > seq_len:
            raise ValueError(
                f"prompt ({len(prompt)}) + response ({len(response)}) tokens exceed "
                f"{seq_len}; raise policy.max_total_sequence_length"
            )
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention[i, : len(ids)] = 1
        token_mask[i, len(prompt) : len(ids)] = 1
    return {
        "input_ids": input_ids,
        "attention_mask": attention,
        "token_mask": token_mask,
        "sample_mask": (
            torch.ones(rows, dtype=torch.long)
            if sample_mask is None
            else torch.tensor(sample_mask, dtype=torch.float32)
        ),
    }


def aligned_logprobs(
    prompts: list[list[int]], response_logprobs: list[list[float]], seq_len: int
) -> torch.Tensor:
    """[B, seq_len] sampler logprobs placed at their response token positions (0 elsewhere)."""
    out = torch.zeros(len(prompts), seq_len, dtype=torch.float32)
    for i, (prompt, lps) in enumerate(zip(prompts, response_logprobs, strict=True)):
        out[i, len(prompt) : len(prompt) + len(lps)] = torch.tensor(lps, dtype=torch.float32)
    return out


def left_padded(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, W] prompt ids left-padded to the longest (W) and their mask (1 = real token)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    return ids, mask


def trained_length(shard: TrainShard, seq_len: int, multiple: int) -> int:
    """The padded length of `shard`'s rows: its longest prompt + response rounded up to
    `multiple` (a tensor-parallel split needs the sequence to divide), at most `seq_len`.

    Rows are padded to what the shard needs, not to the run's maximum: a model that learned
    short answers stops paying for the response budget it no longer uses."""
    longest = max(len(p) + len(r) for p, r in zip(shard.prompts, shard.responses, strict=True))
    return min(seq_len, -(-longest // multiple) * multiple)


def shard_batch(
    shard: TrainShard, seq_len: int, pad_id: int, device: torch.device | str = "cpu"
) -> dict[str, torch.Tensor]:
    """The training batch of one shard, with its advantages and the sampler's logprobs, on
    `device` (the worker's: one host-to-device copy per tensor, here, not per forward)."""
    batch = build_batch(shard.prompts, shard.responses, seq_len, pad_id, shard.sample_mask) | {
        "advantages": torch.tensor(shard.advantages, dtype=torch.float32),
        "generation_logprobs": aligned_logprobs(shard.prompts, shard.generation_logprobs, seq_len),
    }
    return {k: v.to(device) for k, v in batch.items()}


@dataclass(frozen=True)
class LogprobSums:
    """Sums over a batch's trained tokens, for the driver to average over all ranks' tokens."""

    kl_sum: float  # KL(policy || reference) estimate before the step
    prob_error_sum: float  # exp|lp_train - lp_gen|
    tokens: float


def logprob_sums(batch: dict[str, torch.Tensor], cfg: ClippedPGLossConfig) -> LogprobSums:
    """KL and NeMo-RL's token_mult_prob_error diagnostic over `batch`'s trained tokens.

    Needs ``prev_logprobs`` and ``generation_logprobs`` ([B, S]); the KL is 0 without
    ``reference_policy_logprobs`` (skipped when the KL coefficient is 0).
    token_mult_prob_error asks: do training-side logprobs agree with the sampler's?
    """
    mask = loss_mask(batch)
    reference = batch.get("reference_policy_logprobs")
    if reference is None:
        kl = torch.zeros_like(mask)
    else:
        kl = calculate_kl(
            batch["prev_logprobs"][:, 1:],
            reference[:, 1:],
            cfg.reference_policy_kl_type,
            cfg.kl_input_clamp_value,
            cfg.kl_output_clamp_value,
        )
    lp_error = (batch["prev_logprobs"] - batch["generation_logprobs"]).abs()[:, 1:]
    return LogprobSums(
        kl_sum=float((kl * mask).sum()),
        prob_error_sum=float((torch.exp(lp_error * mask) * mask).sum()),
        tokens=float(mask.sum()),
    )
