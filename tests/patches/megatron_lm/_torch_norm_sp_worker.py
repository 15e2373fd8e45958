"""Rank body for test_torch_norm.py's sequence-parallel check: a tiny Llama checkpoint through
the worker's `build_gpt` at TP=1 and at TP=2 with sequence parallelism (2 gloo ranks, CPU):
logits vs transformers, and every norm weight's gradient of one backward pass after
megatron's TP gradient reduction (`_allreduce_non_tensor_model_parallel_grads`) vs TP=1."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist


def grads(checkpoint: Path, tp: int, vocab: int) -> tuple[float, dict[str, torch.Tensor]]:
    from mcore_grpo.models import checks
    from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
    from mcore_grpo.worker.model import build_gpt
    from megatron.core import parallel_state
    from megatron.core.distributed.finalize_model_grads import (
        _allreduce_non_tensor_model_parallel_grads,
    )

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)
    try:
        model_parallel_seed(0, "cpu")
        config = checks.worker_config(checkpoint, tp, 1, vocab)
        parallel = dataclasses.replace(config.parallel, sequence_parallel=tp > 1)
        config = dataclasses.replace(config, parallel=parallel)
        with cpu_device("cpu"):
            tcfg, gpt = build_gpt(config)
            logits = checks.megatron_logits(gpt, vocab)
            weight = torch.randn(logits.shape, generator=torch.Generator().manual_seed(3))
            (logits * weight).sum().backward()
            for p in gpt.parameters():  # what DDP's buffers hold for finalize_model_grads
                cast(Any, p).main_grad = p.grad
            gpt.ddp_config = type("C", (), {"use_megatron_fsdp": False})()
            _allreduce_non_tensor_model_parallel_grads([gpt], tcfg)
            out = {
                n: cast(Any, p).main_grad.clone()
                for n, p in gpt.named_parameters()
                if "layernorm" in n
            }
        diff = checks.max_diff(logits.detach(), checks.transformers_logits(checkpoint, vocab))
        return diff, out
    finally:
        parallel_state.destroy_model_parallel()


def main(rank: int, world: int, port: int, checkpoint: str, result: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from mcore_grpo.models import families

    vocab = families.TINY_SIZES["vocab_size"]
    d1, g1 = grads(Path(checkpoint), 1, vocab)
    d2, g2 = grads(Path(checkpoint), 2, vocab)
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


if __name__ == "__main__":
    import torch.multiprocessing as mp

    port, checkpoint, result = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    mp.spawn(main, args=(2, port, checkpoint, result), nprocs=2)
