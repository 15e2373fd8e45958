"""Expert parallelism against none: EP=2 and EP=1 on the same 2 gloo ranks, same weights, same
batch, compared tensor for tensor.

Both layouts are the worker's own (`make_worker`, distributed optimizer): at EP=1 every rank
holds all experts and their gradients are reduced over the expert-data-parallel group of 2; at
EP=2 each rank holds half the experts, tokens reach them through megatron-core's allgather
dispatcher, and the expert-data-parallel group is 1. Dense weights are data-parallel over both
ranks in both. The EP=1 run's initial weights are loaded into the EP=2 model (rank r's local
expert i is global expert r * experts_per_rank + i, megatron-core's numbering).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import torch
import torch.distributed as dist
from mcore_grpo.worker.config import (
    ModelConfig,
    MoEConfig,
    ParallelConfig,
    WorkerConfig,
)
from mcore_grpo.worker.cpu import cpu_device
from mcore_grpo.worker.model import sync_params
from mcore_grpo.worker.policy_worker import MegatronPolicyWorker
from mcore_grpo.worker.reference import _load_in_place

from tests.integration.worker.harness import (
    VOCAB,
    global_batch,
    make_worker,
    rank_slice,
    tiny_config,
)
from tests.support.device import TEST_DEVICE

EXPERTS = 4
_LOCAL_EXPERT = re.compile(r"^(.*\.local_experts\.)(\d+)(\..*)$")


def moe_config(ep: int) -> WorkerConfig:
    """The tiny GPT, Qwen3-MoE style: 4 experts (top-2, aux and z loss, a shared expert) in
    each of its 2 layers, RMSNorm, SwiGLU, no biases."""
    return dataclasses.replace(
        tiny_config(overlap=False),
        parallel=ParallelConfig(expert_model_parallel_size=ep, expert_tensor_parallel_size=1),
        model=ModelConfig(
            vocab_size=VOCAB,
            ffn_hidden_size=64,
            normalization="RMSNorm",
            swiglu=True,
            add_bias_linear=False,  # Qwen3-MoE's family; megatron's shared expert has no bias
            moe=MoEConfig(
                num_experts=EXPERTS,
                router_topk=2,
                ffn_hidden_size=32,
                shared_expert_intermediate_size=32,
                aux_loss_coeff=1e-2,
                z_loss_coeff=1e-3,
            ),
        ),
    )


def global_name(name: str, ep_rank: int, ep: int) -> str:
    """`name` with a local expert index replaced by its global one."""
    match = _LOCAL_EXPERT.match(name)
    if match is None:
        return name
    head, local, tail = match.groups()
    return f"{head}{ep_rank * (EXPERTS // ep) + int(local)}{tail}"


def _named(tensors: dict[str, torch.Tensor]) -> dict[str, list]:
    """Global names -> nested lists (tensors would travel as file descriptors of a dead rank)."""
    from megatron.core import parallel_state

    ep = parallel_state.get_expert_model_parallel_world_size()
    ep_rank = parallel_state.get_expert_model_parallel_rank()
    return {global_name(n, ep_rank, ep): t.tolist() for n, t in tensors.items()}


def reduced_grads(worker: MegatronPolicyWorker) -> dict[str, torch.Tensor]:
    """Every parameter's reduced gradient, whole: the distributed optimizer leaves each rank
    its shard of each bucket, so the shards are gathered over the buffer's own DP group."""
    ddp = worker.policy.ddp
    params = dict(worker.policy.gpt.named_parameters())
    names = {p: n for n, p in params.items()}
    grads: dict[str, torch.Tensor] = {}
    for buf in [*ddp.buffers, *ddp.expert_parallel_buffers]:
        group = buf.data_parallel_group
        size, rank = group.size(), group.rank()
        whole = torch.zeros_like(buf.grad_data)
        for bucket in buf.buckets:
            n = bucket.grad_data.numel() // size
            lo = bucket.offset + rank * n
            shards = [torch.empty_like(buf.grad_data[lo : lo + n]) for _ in range(size)]
            dist.all_gather(shards, buf.grad_data[lo : lo + n].contiguous(), group=group)
            whole[bucket.offset : bucket.offset + n * size] = torch.cat(shards)
        for param, (start, end, _) in buf.param_index_map.items():
            grads[names[param]] = whole[start:end].view(param.shape).clone()
    return grads


def logprobs_grads_and_step(ep: int, initial: dict[str, list] | None = None) -> dict[str, Any]:
    """One rank: (load `initial`,) logprobs of this DP rank's rows, one train step; returns the
    initial weights, logprobs, reduced gradients and updated weights under global names."""
    from megatron.core import parallel_state

    worker = make_worker(moe_config(ep))
    assert worker.layout.dp_size == 2
    gpt = worker.policy.gpt
    if initial is not None:
        ep_rank = parallel_state.get_expert_model_parallel_rank()
        local = {
            n: torch.tensor(initial[global_name(n, ep_rank, ep)])
            for n, _ in [*gpt.named_parameters(), *gpt.named_buffers()]
        }
        _load_in_place(gpt, local)
    start = {n: t.detach().clone() for n, t in [*gpt.named_parameters(), *gpt.named_buffers()]}
    batch = rank_slice(global_batch(rows=8), worker.layout.dp_rank, 2)
    worker.prepare_for_lp_inference()
    logprobs = worker.get_logprobs(batch)
    worker.prepare_for_training()
    metrics = worker.train(batch)
    grads = reduced_grads(worker)
    with cpu_device(TEST_DEVICE):
        sync_params(worker.policy)
    after = {n: p.detach().clone() for n, p in gpt.named_parameters()}
    return {
        "initial": _named(start),
        "logprobs": logprobs.tolist(),
        "grads": _named(grads),
        "after": _named(after),
        "grad_norm": metrics["grad_norm"],
    }


def max_diff(ep1: dict[str, list], ep2: dict[str, list]) -> float:
    """Max |EP=2 - EP=1| over the tensors the EP=2 rank holds (all dense, its experts)."""
    return max((torch.tensor(v) - torch.tensor(ep1[n])).abs().max().item() for n, v in ep2.items())
