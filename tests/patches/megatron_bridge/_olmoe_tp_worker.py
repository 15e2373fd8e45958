"""Rank body for test_olmoe_qk_norm.py: a tiny OLMoE checkpoint through AutoBridge at TP=1 and
TP=2 (2 gloo ranks, CPU): logits vs transformers, and the q/k-norm weight gradients of one
backward pass at TP=2 (after megatron's TP gradient reduction) vs TP=1."""

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
    d1, g1 = norm_grads(Path(checkpoint), 1, vocab, train=False)
    d2, g2 = norm_grads(Path(checkpoint), 2, vocab, train=False)
    qk = [n for n in g1 if "q_layernorm" in n or "k_layernorm" in n]
    assert qk, sorted(g1)
    assert all(float(g1[n].abs().max()) > 1e-3 for n in qk), "no q/k-norm gradient"
    worst = max(float((g1[n] - g2[n]).abs().max()) for n in qk)
    if rank == 0:
        torch.save({"tp1": d1, "tp2": d2, "qk_grad": worst, "names": qk}, result)
    dist.barrier()
    dist.destroy_process_group()
