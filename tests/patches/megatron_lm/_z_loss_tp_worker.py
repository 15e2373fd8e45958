"""Rank body for test_moe_z_loss_over_ranks.py: the model matrix's shared-prefix check on a
tiny checkpoint at TP=2 with sequence parallelism (2 gloo ranks, CPU), its figures saved by
rank 0."""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist


def main(rank: int, world: int, port: int, checkpoint: str, result: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from model_matrix import checks, families

    vocab = families.TINY_SIZES["vocab_size"]
    figures = checks.shared_prefix_difference(Path(checkpoint), 2, 1, vocab, moe=True)
    gathered: list[dict[str, float] | None] = [None] * world
    dist.all_gather_object(gathered, figures)
    if rank == 0:
        torch.save({k: max(f[k] for f in gathered if f) for k in figures}, result)
    dist.barrier()
    dist.destroy_process_group()
