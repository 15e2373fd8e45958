"""The seed crash end to end: generation adds and removes `cudagraph_manager` submodules
while DDP forward pre-hooks (overlap_param_gather) are registered, then reference logprobs
disable the hooks, then a train step. Unpatched megatron-core (core_v0.16.1 .. 0.19.2) raises
AssertionError in `DistributedDataParallel.disable_forward_pre_hook`; with
patches/Megatron-LM/ddp-forward-pre-hook-handles.patch it passes."""

from __future__ import annotations

import torch
from mcore_grpo.worker.cpu import cpu_device
from mcore_grpo.worker.generation import SamplingParams
from mcore_grpo.worker.model import sync_params

from tests.integration.worker.harness import (
    cpu_cuda_graph_toggle,
    global_batch,
    make_worker,
    prompts,
    seeded,
    tiny_config,
)
from tests.support.device import TEST_DEVICE


def test_generation_cudagraphs_then_reference_logprobs_then_train(world1: None) -> None:
    worker = make_worker(tiny_config(overlap=True), cuda_graph_toggle=cpu_cuda_graph_toggle)
    batch = global_batch(rows=4)
    worker.train(batch)  # leaves a pending param all-gather (overlap_param_gather)

    worker.prepare_for_generation()
    layers_with_manager = [
        m for m in worker.policy.gpt.modules() if hasattr(m, "cudagraph_manager")
    ]
    assert layers_with_manager, "the generation phase must attach cudagraph_manager submodules"
    ids, mask = prompts()
    out = worker.generate(ids, mask, SamplingParams(max_new_tokens=3), seeded(0))
    assert out.output_ids.shape[1] == ids.shape[1] + 3
    worker.finish_generation()
    assert not any(hasattr(m, "cudagraph_manager") for m in worker.policy.gpt.modules())

    worker.prepare_for_lp_inference()
    policy_lp = worker.get_logprobs(batch)
    ref_lp = worker.get_reference_policy_logprobs(batch)  # disable_forward_pre_hook: the crash
    assert not torch.equal(policy_lp, ref_lp), "reference weights were not swapped in"
    assert torch.equal(worker.get_logprobs(batch), policy_lp), "policy weights not restored"

    # The reference logprobs are the initial model's: compare with a fresh worker.
    fresh = make_worker(tiny_config(overlap=True))
    fresh.prepare_for_lp_inference()
    assert torch.allclose(fresh.get_logprobs(batch), ref_lp, atol=1e-6)

    worker.prepare_for_training()
    assert worker.train(batch)["update_successful"] == 1.0
    # The same two steps on a worker that never generated or swapped: identical weights.
    fresh.prepare_for_training()
    fresh.train(batch)
    fresh.train(batch)
    with cpu_device(TEST_DEVICE):
        sync_params(worker.policy)
        sync_params(fresh.policy)
    fresh_params = dict(fresh.policy.gpt.named_parameters())
    diff = max(
        (p.detach() - fresh_params[n].detach()).abs().max().item()
        for n, p in worker.policy.gpt.named_parameters()
    )
    assert diff < 1e-6, diff
