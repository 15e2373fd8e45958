"""Rank body for test_torch_norm.py's sequence-parallel check: a tiny Llama checkpoint through
the worker's `build_gpt` at TP=1 and at TP=2 with sequence parallelism (2 gloo ranks, CPU):
logits vs transformers, and every norm weight's gradient of one backward pass after
megatron's TP gradient reduction (`_allreduce_non_tensor_model_parallel_grads`) vs TP=1."""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist

from tests.patches.tp_grads import norm_grads


def main(rank: int, world: int, port: int, checkpoint: str, result: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from model_matrix import families

    vocab = families.TINY_SIZES["vocab_size"]
    d1, g1 = norm_grads(Path(checkpoint), 1, vocab)
    d2, g2 = norm_grads(Path(checkpoint), 2, vocab, sequence_parallel=True)
    assert sorted(g1) == sorted(g2) and g1, (sorted(g1), sorted(g2))
    worst = max(float((g1[n] - g2[n]).abs().max()) for n in g1)
    smallest = min(float(g1[n].abs().max()) for n in g1)
    if rank == 0:
        torch.save(
            {"tp1": d1, "tp2": d2, "norm_grad": worst, "names": sorted(g1), "smallest": smallest},
            result,
        )
    dist.barrier()
    dist.destroy_process_group()
