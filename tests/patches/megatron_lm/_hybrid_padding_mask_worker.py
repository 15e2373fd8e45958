"""Rank body for test_hybrid_padding_mask_sp.py: a tiny hybrid MoE checkpoint's whole rows
(left-padded prompts, completions of unequal lengths) through the worker's logprob entry in a
training forward and backward, at TP=1 and at TP=2 with sequence parallelism (2 gloo ranks,
CPU); rank 0 saves the largest logprob difference."""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist


def _logprobs(checkpoint: Path, tp: int, vocab: int) -> torch.Tensor:
    from mcore_grpo.worker.logprobs import policy_token_logprobs
    from model_matrix import checks

    with (
        checks.imported_model(checkpoint, tp, 1, vocab, sequence_parallel=True) as (config, gpt),
        torch.enable_grad(),
        checks.aux_loss_scale_kept(),
    ):
        gpt.train()  # the MoE layers route with the padding mask in training forwards
        ids, valid = checks.shared_prefix_batch(vocab)
        logprobs, _ = policy_token_logprobs(gpt, ids, valid, config, False)
        logprobs.sum().backward()
        return logprobs.detach()


def main(rank: int, world: int, port: int, checkpoint: str, result: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from model_matrix import families

    vocab = families.TINY_SIZES["vocab_size"]
    tp1 = _logprobs(Path(checkpoint), 1, vocab)
    tp2 = _logprobs(Path(checkpoint), 2, vocab)
    if rank == 0:
        torch.save({"logprobs": float((tp1 - tp2).abs().max())}, result)
    dist.barrier()
    dist.destroy_process_group()
