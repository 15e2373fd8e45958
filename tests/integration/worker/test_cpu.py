"""mcore_grpo.worker.cpu: redirects scoped, refused with CUDA, enough for megatron-core on CPU."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from mcore_grpo.worker import cpu

pytestmark = pytest.mark.cpu_only(
    reason="tests the CPU redirects of mcore_grpo.worker.cpu, which refuse to run where CUDA is"
)


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


def test_without_tensor_redirects_only_the_cuda_functions_are_replaced() -> None:
    with cpu.cpu_device("cpu", tensor_redirects=False) as active:
        assert active and cpu.redirects_active()
        assert torch.cuda.current_device() == torch.device("cpu")
        # No mode: a tensor is what it is, and naming the CUDA device fails as it would.
        assert torch.zeros(1).type() == "torch.FloatTensor"
        with pytest.raises((RuntimeError, AssertionError)):
            torch.zeros(1, device="cuda")
        with cpu.cpu_device("cpu"):  # an inner block with them still redirects tensors
            assert torch.zeros(1, device="cuda").device.type == "cpu"
    assert not cpu.redirects_active()


def _key_bias_rows(tcfg: Any) -> torch.Tensor:
    """Bool mask over `linear_qkv.bias`: the KEY bias entries.

    megatron-core lays the fused QKV output out per query group as [q heads, k, v]. A key bias
    b adds q_i . b to every score of query i, which softmax cancels, so its gradient is
    mathematically zero and only float noise reaches it."""
    heads, groups = tcfg.num_attention_heads, tcfg.num_query_groups or tcfg.num_attention_heads
    head_dim = tcfg.kv_channels or tcfg.hidden_size // heads
    q_width = heads // groups * head_dim
    per_group = torch.zeros(q_width + 2 * head_dim, dtype=torch.bool)
    per_group[q_width : q_width + head_dim] = True
    return per_group.repeat(groups)


def adam_update_bound(steps: int, beta1: float, beta2: float) -> float:
    """Largest |p_t - p_0| / lr Adam (bias-corrected, no weight decay) can reach in `steps`.

    Step t moves by lr * m_hat / (sqrt(v_hat) + eps) with m_hat = sum_i w_i g_i and
    v_hat = sum_i u_i g_i^2; Cauchy-Schwarz gives |m_hat| <= sqrt(sum_i w_i^2 / u_i) *
    sqrt(v_hat), whatever the gradients are (noise included)."""
    total = 0.0
    for t in range(1, steps + 1):
        w = [(1 - beta1) * beta1 ** (t - i) / (1 - beta1**t) for i in range(1, t + 1)]
        u = [(1 - beta2) * beta2 ** (t - i) / (1 - beta2**t) for i in range(1, t + 1)]
        total += math.sqrt(sum(wi * wi / ui for wi, ui in zip(w, u, strict=True)))
    return total


def test_adam_update_bound_first_step_is_lr() -> None:
    # Step 1: m_hat = g, v_hat = g^2, so the move is exactly lr * sign(g).
    assert adam_update_bound(1, 0.9, 0.999) == pytest.approx(1.0)
    # Step 2 by hand: w = (0.09, 0.1) / 0.19, u = (0.000999, 0.001) / 0.001999.
    w, u = (0.09 / 0.19, 0.1 / 0.19), (0.000999 / 0.001999, 0.001 / 0.001999)
    by_hand = 1.0 + math.sqrt(w[0] ** 2 / u[0] + w[1] ** 2 / u[1])
    assert adam_update_bound(2, 0.9, 0.999) == pytest.approx(by_hand, rel=1e-12)


def test_megatron_ddp_distributed_optimizer_adam_on_cpu(world1: None) -> None:
    """Tiny GPTModel + DDP(dist-opt, overlap_param_gather) + get_megatron_optimizer: five Adam
    steps (default eps 1e-8) match plain torch Adam on a copy of the same weights.

    The comparison is split where it is well conditioned. Adam divides each gradient by its own
    magnitude, so the attention KEY biases -- whose gradient is mathematically zero (softmax
    cancels them) -- move by up to lr per step in the direction of float noise: their values
    differ between two correct implementations by O(lr) and depend on the CPU's summation
    order (1.3e-4 was seen on an AVX2 EPYC). They are checked against Adam's derived update
    bound, after checking their gradient really is noise. Every other parameter has a real
    gradient and is compared elementwise; 1e-6 parity with adam_eps=1 is in
    test_train_step.py."""
    from mcore_grpo.worker.model import sync_params

    from tests.integration.worker.harness import (
        global_batch,
        make_worker,
        reference_step,
        tiny_config,
    )

    steps = 5
    worker = make_worker(tiny_config(overlap=True, eps=1e-8))
    o = worker.config.optimizer
    batch = global_batch(rows=4)
    initial = {k: v.clone() for k, v in worker.reference.state_dict().items()}
    first_grads, _ = reference_step(worker, initial, batch, steps=1)
    for _ in range(steps):
        worker.train(batch)
    with cpu.cpu_device("cpu"):
        sync_params(worker.policy)
    _, ref_params = reference_step(worker, initial, batch, steps=steps)
    moved = max((ref_params[n] - initial[n]).abs().max().item() for n in ref_params)
    assert moved > 1e-3, "the reference did not train; the comparison would be vacuous"

    key_rows = _key_bias_rows(worker.policy.transformer_config)
    grad_scale = max(g.abs().max().item() for g in first_grads.values())
    bound = o.lr * adam_update_bound(steps, o.adam_beta1, o.adam_beta2) * (1 + 1e-6)
    worst, key_params = 0.0, 0
    for name, param in worker.policy.gpt.named_parameters():
        got, want = param.detach(), ref_params[name]
        if name.endswith("self_attention.linear_qkv.bias"):
            key_params += 1
            noise = first_grads[name][key_rows].abs().max().item()
            assert noise < 1e-5 * grad_scale, f"{name}: key-bias gradient {noise} is not noise"
            for side in (got, want):
                assert (side - initial[name])[key_rows].abs().max().item() <= bound, name
            got, want = got[~key_rows], want[~key_rows]
        worst = max(worst, (got - want).abs().max().item())
    assert key_params == worker.config.model.num_layers
    assert worst < 1e-4
