"""TP=2 on 2 gloo ranks against plain PyTorch at TP=1: the same logprobs and the same update.

The TP=2 worker's shards are gathered into full tensors along megatron's `partition_dim`
(the TP=1 layout: a query group's q, k and v rows stay together, groups in rank order). The
reference loads those weights into a TP=1 model and takes one torch Adam step on the same
loss. This covers the TP-gathered logits, the vocab padded for TP divisibility, and the
distributed optimizer over TP-sharded parameters.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist
from mcore_grpo.worker.config import ModelConfig, ParallelConfig, WorkerConfig
from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
from mcore_grpo.worker.forward import next_token_logprobs
from mcore_grpo.worker.model import build_gpt, sync_params
from mcore_grpo.worker.parallel import init_model_parallel
from mcore_grpo.worker.reference import _load_in_place

from tests.integration.worker.harness import (
    global_batch,
    make_worker,
    reference_step,
    spawn2,
    tiny_config,
)
from tests.support.dense_reference import reference_logits
from tests.support.device import TEST_DEVICE
from tests.support.ports import free_port

REAL, PADDED = 60, 64  # 64 rows = 32 per TP rank; ids 60..63 are padding


def _config(tp: int) -> WorkerConfig:
    return dataclasses.replace(
        tiny_config(overlap=False),
        parallel=ParallelConfig(tensor_model_parallel_size=tp),
        model=ModelConfig(vocab_size=REAL, padded_vocab_size_override=PADDED),
    )


def _batch() -> dict[str, torch.Tensor]:
    batch = global_batch(rows=4)
    batch["input_ids"] = batch["input_ids"] % REAL
    return batch


def _full(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter as the TP=1 model holds it: TP shards gathered along partition_dim."""
    from megatron.core import parallel_state

    group = parallel_state.get_tensor_model_parallel_group()
    out = {}
    for name, param in model.named_parameters():
        data = param.detach().clone()
        if getattr(param, "tensor_model_parallel", False):
            parts = [torch.empty_like(data) for _ in range(dist.get_world_size(group))]
            dist.all_gather(parts, data, group=group)
            # megatron sets it on every TP-sharded parameter
            data = torch.cat(parts, dim=param.partition_dim)  # pyrefly: ignore[missing-attribute]
        out[name] = data
    return out


def tp2_logprobs_and_step() -> dict[str, Any]:

    worker = make_worker(_config(tp=2))
    assert worker.layout.dp_size == 1
    batch = _batch()
    initial = _full(worker.policy.gpt)
    worker.prepare_for_lp_inference()
    logprobs = worker.get_logprobs(batch)
    worker.prepare_for_training()
    worker.train(batch)
    with cpu_device(TEST_DEVICE):
        sync_params(worker.policy)
    after = _full(worker.policy.gpt)
    # Nested lists, not tensors: torch would pass tensors between processes as shared-memory
    # file descriptors, which die with the rank process. float32 -> float -> float32 is exact.
    return {
        "initial": {n: t.tolist() for n, t in initial.items()},
        "logprobs": logprobs.tolist(),
        "after": {n: t.tolist() for n, t in after.items()},
    }


def _tensors(rank_out: dict[str, Any]) -> dict[str, Any]:
    def back(x: Any) -> torch.Tensor:
        return torch.tensor(x, dtype=torch.float32)

    return {
        "initial": {n: back(v) for n, v in rank_out["initial"].items()},
        "logprobs": back(rank_out["logprobs"]),
        "after": {n: back(v) for n, v in rank_out["after"].items()},
    }


def compare_with_tp1() -> dict[str, float]:
    """Run TP=2 on 2 gloo ranks (a spawn), redo it in plain PyTorch at TP=1 in this process
    (which must be a 1-rank torch.distributed world), and return the figures."""
    raw = spawn2(tp2_logprobs_and_step, free_port())
    out = {rank: _tensors(value) for rank, value in raw.items()}
    ranks_agree = torch.equal(out[0]["logprobs"], out[1]["logprobs"]) and all(
        torch.equal(value, out[1][key][name])
        for key in ("initial", "after")
        for name, value in out[0][key].items()
    )
    tp1 = _config(tp=1)
    init_model_parallel(tp1)
    batch = _batch()
    with cpu_device(TEST_DEVICE), torch.no_grad():
        model_parallel_seed(tp1.seed, TEST_DEVICE)
        _, ref = build_gpt(tp1)
        _load_in_place(ref, out[0]["initial"])
        logits = reference_logits(ref, batch["input_ids"], batch["attention_mask"])
        ref_lp = next_token_logprobs(logits, batch["input_ids"], REAL)
    valid = batch["attention_mask"].bool()
    # The trained predictions of real tokens: `get_logprobs` of a batch with a token_mask
    # computes only those (the LM head at the scored positions), 0 elsewhere.
    real = valid[:, :-1] & valid[:, 1:] & (batch["token_mask"][:, 1:] > 0)
    holder: Any = SimpleNamespace(config=tp1)  # reference_step reads only `.config`
    _, ref_after = reference_step(holder, out[0]["initial"], batch)
    return {
        "ranks_agree": float(ranks_agree),
        # Over the trained predictions of a real token from a real token (`policy_token_logprobs`).
        "logprob_max_abs_diff": (out[0]["logprobs"][:, 1:] - ref_lp)[real].abs().max().item(),
        "step_moved_params_by": max(
            (ref_after[n] - v).abs().max().item() for n, v in out[0]["initial"].items()
        ),
        "param_max_abs_diff": max(
            (out[0]["after"][n] - ref_after[n]).abs().max().item() for n in ref_after
        ),
    }
