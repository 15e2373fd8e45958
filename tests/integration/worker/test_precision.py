"""bf16 through megatron-core's own mixed precision: `Float16Module` around the GPTModel, fp32
logits out of it, `get_megatron_optimizer(bf16=True)` with fp32 main params. Runs on the
suite's device (the CPU where there is no GPU: torch runs bf16 matmuls there); the `gpu`
test repeats the step on CUDA explicitly."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from mcore_grpo.worker.config import WorkerConfig

from tests.integration.worker.harness import global_batch, make_worker, tiny_config
from tests.support.device import TEST_DEVICE


def _bf16(config: WorkerConfig) -> WorkerConfig:
    return dataclasses.replace(config, precision="bfloat16")


@dataclasses.dataclass
class _Run:
    """One fresh worker's initial weights, logprobs before and after one step, its metrics."""

    initial: dict[str, torch.Tensor]
    before: torch.Tensor
    metrics: dict[str, float]
    after: torch.Tensor


def _step_and_logprobs(config: WorkerConfig) -> _Run:
    """Build a fresh worker (same seed -> same init), score, step once, score again."""
    from megatron.core import parallel_state

    # Each worker re-seeds; a fresh parallel state keeps the two builds identical.
    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    worker = make_worker(config)
    initial = {n: p.detach().clone() for n, p in worker.policy.gpt.named_parameters()}
    batch = global_batch(rows=4)
    before = worker.get_logprobs(batch)
    metrics = worker.train(batch)
    after = worker.get_logprobs(batch)
    return _Run(initial, before, metrics, after)


def test_bf16_worker_wraps_float16module_and_matches_fp32(world1: None) -> None:
    from megatron.core.transformer.module import Float16Module

    fp32_cfg = tiny_config(overlap=False, eps=1e-8)
    bf16_cfg = _bf16(fp32_cfg)
    worker = make_worker(bf16_cfg)
    assert isinstance(worker.policy.ddp.module, Float16Module)
    assert all(p.dtype == torch.bfloat16 for p in worker.policy.gpt.parameters())
    del worker

    r32 = _step_and_logprobs(fp32_cfg)
    r16 = _step_and_logprobs(bf16_cfg)
    # One seed, one start: the bf16 weights are the fp32 ones rounded to bf16 (within one bf16
    # ulp, 2^-7 relative), else every difference below would be the init's, not bf16's.
    assert r16.initial.keys() == r32.initial.keys()
    for name, w32 in r32.initial.items():
        torch.testing.assert_close(
            r16.initial[name].float(),
            w32,
            rtol=2**-7,
            atol=0.0,
            msg=lambda m, name=name: f"{name}: bf16 and fp32 workers initialised differently\n{m}",
        )
    lp32, lp16 = r32.before, r16.before
    assert lp16.dtype == torch.float32, "logprobs must come out of Float16Module in fp32"
    # bf16 keeps 8 mantissa bits (relative error 2^-8 = 0.4% per rounding); logprobs of a
    # 64-token vocab are ~ -4.2, so a few roundings through 2 layers stay well under 0.1.
    assert (lp16 - lp32).abs().max().item() < 0.1
    assert (lp16 - lp32).abs().max().item() > 0, "bf16 run identical to fp32: not in bf16"
    m16, m32 = r16.metrics, r32.metrics
    assert m16["update_successful"] == 1.0
    assert abs(m16["global_loss"] - m32["global_loss"]) < 0.05 * max(1.0, abs(m32["global_loss"]))
    # The step moved the bf16 model the way it moved the fp32 one (fp32 main params, Adam).
    d32, d16 = r32.after - lp32, r16.after - lp16
    cos = torch.nn.functional.cosine_similarity(d32.flatten(), d16.flatten(), dim=0).item()
    assert d32.abs().max().item() > 1e-3, "the fp32 step did not move the logprobs"
    assert cos > 0.9, f"bf16 step went elsewhere than fp32 (cosine {cos:.3f})"


@pytest.mark.gpu
def test_bf16_worker_step_on_cuda(world1: None) -> None:
    """The bf16 worker on the GPU: builds on CUDA, steps, logprobs in fp32 on the device."""
    assert TEST_DEVICE == "cuda"
    cfg = _bf16(tiny_config(overlap=True, eps=1e-8, device="cuda"))
    run = _step_and_logprobs(cfg)
    assert run.before.device.type == "cuda" and run.before.dtype == torch.float32
    assert run.metrics["update_successful"] == 1.0
    assert (run.after - run.before).abs().max().item() > 1e-3
