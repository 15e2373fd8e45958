"""mcore_grpo.worker.cpu: redirects scoped, refused with CUDA, enough for megatron-core on CPU."""

from __future__ import annotations

import pytest
import torch
from mcore_grpo.worker import cpu


def test_noop_for_cuda_device() -> None:
    original = torch.cuda.current_device
    with cpu.cpu_device("cuda") as active:
        assert active is False
        assert torch.cuda.current_device is original


def test_refuses_when_cuda_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(RuntimeError, match="CUDA is available"), cpu.cpu_device("cpu"):
        pass


def test_redirects_scoped_and_restored() -> None:
    saved = {n: getattr(torch.cuda, n) for n in ("current_device", "current_stream", "synchronize")}
    with cpu.cpu_device("cpu") as active:
        assert active and cpu.redirects_active()
        assert torch.cuda.current_device() == torch.device("cpu")
        stream = torch.cuda.current_stream()
        stream.wait_stream(stream)  # the no-op stand-in stream
        with cpu.cpu_device("cpu"):  # re-entrant
            pass
        assert torch.cuda.current_device() == torch.device("cpu")
        t = torch.zeros(3, device="cuda")
        assert t.device.type == "cpu"
        assert t.type() == "torch.cuda.FloatTensor"
        assert torch.ones(2).to("cuda").device.type == "cpu"
    assert not cpu.redirects_active()
    for name, fn in saved.items():
        assert getattr(torch.cuda, name) is fn
    assert torch.zeros(1).type() == "torch.FloatTensor"
    with pytest.raises((RuntimeError, AssertionError)):
        torch.zeros(1, device="cuda")


def test_megatron_ddp_distributed_optimizer_adam_on_cpu(world1: None) -> None:
    """Tiny GPTModel + DDP(dist-opt, overlap_param_gather) + get_megatron_optimizer: five Adam
    steps match plain torch Adam on a copy of the same weights.

    Tolerance 1e-4, not 1e-6: Adam normalises each gradient by its own magnitude, so float
    noise in the (mathematically zero) attention key-bias gradients becomes a visible update;
    1e-6 parity is checked with adam_eps=1 in test_train_step.py."""
    from mcore_grpo.worker.model import sync_params
    from mcore_grpo.worker.policy_worker import MegatronPolicyWorker

    from tests.integration.worker.harness import (
        global_batch,
        param_diff,
        reference_step,
        tiny_config,
    )

    worker = MegatronPolicyWorker(tiny_config(overlap=True, eps=1e-8))
    batch = global_batch(rows=4)
    initial = {k: v.clone() for k, v in worker.reference.state_dict().items()}
    for _ in range(5):
        worker.train(batch)
    with cpu.cpu_device("cpu"):
        sync_params(worker.policy)
    _, ref_params = reference_step(worker, initial, batch, steps=5)
    moved = max((ref_params[n] - initial[n]).abs().max().item() for n in ref_params)
    assert moved > 1e-3, "the reference did not train; the comparison would be vacuous"
    assert param_diff(worker, ref_params) < 1e-4
