"""The MoE worker in one process: the split step equals the one-shot step (weights and router
metrics), the router metrics count what the routers routed, and bad MoE layouts are refused."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from mcore_grpo.worker.config import MoEConfig, ParallelConfig
from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
from mcore_grpo.worker.model import sync_params

from tests.integration.worker.ep_parity import moe_config
from tests.integration.worker.harness import SEQ, global_batch, make_worker
from tests.support.device import TEST_DEVICE

LAYERS, TOPK = 2, 2


def _moe(**changes: object) -> MoEConfig:
    base = moe_config(ep=1).model.moe
    assert base is not None
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _worker(moe: MoEConfig | None = None):
    config = moe_config(ep=1)
    if moe is not None:
        config = dataclasses.replace(config, model=dataclasses.replace(config.model, moe=moe))
    return make_worker(config)


def test_split_step_equals_one_shot_with_experts(world1: None) -> None:
    batch = global_batch(rows=8)
    initial: dict[str, dict[str, torch.Tensor]] = {}
    results = {}
    for mode in ("split", "oneshot"):
        worker = _worker()
        initial[mode] = {n: p.detach().clone() for n, p in worker.policy.gpt.named_parameters()}
        worker.prepare_for_training()
        if mode == "split":
            worker.begin_train_step()
            # Chunks on microbatch bounds (micro_batch_size 2): the load-balancing loss is a
            # function of each microbatch's routing, so other cuts train another objective.
            for lo, hi in itertools.pairwise([0, 2, 6, 8]):
                worker.train_microbatch({n: t[lo:hi] for n, t in batch.items()})
            metrics = worker.finish_train_step()
        else:
            metrics = worker.train(batch)
        with cpu_device(TEST_DEVICE):
            sync_params(worker.policy)
        params = {n: p.detach().clone() for n, p in worker.policy.gpt.named_parameters()}
        results[mode] = (metrics, params)
    # One seed, one start: else a difference below would be the init's, not the step's.
    for name, p in initial["oneshot"].items():
        assert torch.equal(initial["split"][name], p), f"{name} initialised differently"
    (split, split_params), (oneshot, oneshot_params) = results["split"], results["oneshot"]
    assert max((split_params[n] - p).abs().max().item() for n, p in oneshot_params.items()) < 1e-6
    assert split["moe/tokens_per_expert"] == oneshot["moe/tokens_per_expert"]
    for key in ("moe/load_balancing_loss", "moe/z_loss"):
        assert split[key] == pytest.approx(oneshot[key], rel=1e-6)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_worker_seed_fixes_the_cpu_drawn_router_init(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """megatron-core draws the router's initial weight from the CPU generator even on a GPU
    (moe/router.py `Router.reset_parameters`), so the worker's seed must reach that generator
    on both devices; megatron-core's CUDA seeding is stubbed so this runs without a GPU."""
    from megatron.core import tensor_parallel

    monkeypatch.setattr(tensor_parallel, "model_parallel_cuda_manual_seed", lambda *a, **k: None)
    draws = []
    for _ in range(2):
        model_parallel_seed(1234, device)
        draws.append(torch.randn(4, 8))
        torch.randn(3)  # CPU draws between two workers must not reach the second one
    assert torch.equal(draws[0], draws[1])


def test_router_metrics_count_every_routed_token(world1: None) -> None:
    batch = global_batch(rows=8)
    worker = _worker()
    worker.prepare_for_training()
    metrics = worker.train(batch)
    tokens = metrics["moe/tokens_per_expert"]
    # Every real token of every row goes through each layer's router; padding counts nothing.
    real = int(batch["attention_mask"].sum())
    assert real < 8 * SEQ
    assert sum(tokens) == real * LAYERS * TOPK
    assert metrics["moe/dropped_tokens"] == 0.0  # dropless
    assert metrics["moe/load_imbalance"] == pytest.approx(max(tokens) * len(tokens) / sum(tokens))
    assert 0.5 < metrics["moe/load_balancing_loss"] < 2.0  # ~1 near balance (switch loss / coeff)
    assert metrics["moe/z_loss"] > 0.0
    # Logprob passes are not training: they add nothing to the next step's counts.
    worker.prepare_for_lp_inference()
    worker.get_logprobs(batch)
    worker.prepare_for_training()
    assert sum(worker.train(batch)["moe/tokens_per_expert"]) == sum(tokens)


def test_a_capacity_factor_drops_tokens_and_says_how_many(world1: None) -> None:
    worker = _worker(_moe(capacity_factor=0.5))
    worker.prepare_for_training()
    batch = global_batch(rows=8)
    metrics = worker.train(batch)
    routed = sum(metrics["moe/tokens_per_expert"])
    assert metrics["moe/dropped_tokens"] > 0
    # Every real token's assignments, routed or dropped; padding columns count for nothing.
    real = int(batch["attention_mask"].sum())
    assert real < 8 * SEQ
    assert routed + metrics["moe/dropped_tokens"] == real * LAYERS * TOPK


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"parallel": ParallelConfig(expert_model_parallel_size=3)},
            r"does not divide the model's 4 experts; use one of \[1, 2, 4\]",
        ),
        (
            {"parallel": ParallelConfig(tensor_model_parallel_size=2)},
            r"MoE layers at tensor_model_parallel_size > 1 only with sequence_parallel=True",
        ),
        (
            {"model": dataclasses.replace(moe_config(ep=1).model, add_bias_linear=True)},
            r"shared_expert_intermediate_size needs model.add_bias_linear=False",
        ),
    ],
)
def test_a_bad_moe_config_is_refused_naming_the_fix(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(moe_config(ep=1), **change).validate()
