"""One rank's half of the two-rank gradient checks (run from the `_*_worker.py` scripts): a
checkpoint through the worker's `build_gpt` at a TP size, its logits against transformers',
and the norm weights' gradients of one backward pass after megatron's TP gradient reduction
(`_allreduce_non_tensor_model_parallel_grads`, as finalize_model_grads does)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, cast

import torch


def norm_grads(
    checkpoint: Path, tp: int, vocab: int, *, sequence_parallel: bool = False, train: bool = True
) -> tuple[float, dict[str, torch.Tensor]]:
    """(max |megatron - transformers| logits, {norm parameter name: reduced gradient}) at `tp`.
    `train=False` runs the forward in eval mode (megatron-core refuses MoE layers in training
    mode at TP > 1 without sequence parallelism)."""
    from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
    from mcore_grpo.worker.model import build_gpt
    from megatron.core import parallel_state
    from megatron.core.distributed.finalize_model_grads import (
        _allreduce_non_tensor_model_parallel_grads,
    )
    from model_matrix import checks

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)
    try:
        model_parallel_seed(0, "cpu")
        config = checks.worker_config(checkpoint, tp, 1, vocab)
        parallel = dataclasses.replace(config.parallel, sequence_parallel=sequence_parallel)
        config = dataclasses.replace(config, parallel=parallel)
        with cpu_device("cpu"):
            tcfg, gpt = build_gpt(config)
            if not train:
                gpt.eval()
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
