"""Test harness: tiny worker configs, synthetic GRPO batches, a 2-process gloo spawn, and the
plain-PyTorch reference step the parity tests compare against."""

from __future__ import annotations

import io
import os
import queue
import time
import traceback
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist
from mcore_grpo.config.loss import ClippedPGLossConfig, LossLevel
from mcore_grpo.config.policy import DDPSection, OptimizerSection
from mcore_grpo.grpo.algorithm import loss as grpo_loss
from mcore_grpo.worker.config import WorkerConfig
from mcore_grpo.worker.cpu import cpu_device
from mcore_grpo.worker.forward import next_token_logprobs
from mcore_grpo.worker.model import build_gpt
from mcore_grpo.worker.policy_worker import MegatronPolicyWorker
from mcore_grpo.worker.reference import _load_in_place
from mcore_grpo.worker.sampling import GenerationOutput

from tests.support import warm_spawn
from tests.support.dense_reference import reference_logits
from tests.support.device import MULTI_RANK_CPU, TEST_DEVICE

VOCAB = 64
REAL_VOCAB = VOCAB - 8  # the tokenizer's ids; the rest is padded vocabulary, never sampled
GREEDY = 1e-4  # temperature: softmax of logits / 1e-4 is one-hot on the argmax
SEQ = 10


def make_worker(config: WorkerConfig, **kwargs: Any) -> MegatronPolicyWorker:
    """A worker with the GRPO clipped policy-gradient loss unless `loss_sum_fn` is given."""
    kwargs.setdefault("loss_sum_fn", grpo_loss.worker_default_loss(config.loss))
    return MegatronPolicyWorker(config, **kwargs)


def tiny_config(
    level: LossLevel = "token",
    overlap: bool = True,
    clip: float = 0.0,
    mbs: int = 2,
    eps: float = 1.0,
    device: str = TEST_DEVICE,
) -> WorkerConfig:
    """Tiny fp32 GPT, distributed optimizer (Adam only), overlap flags as asked, no clipping.

    Parity uses adam_eps=1: Adam's first step is lr*g/(|g|+eps); with the default 1e-8 it turns
    1e-10 float noise in mathematically-zero gradients (attention key biases) into +-lr
    differences, so parameters could not be compared to 1e-6. eps=1 keeps the update linear
    in g for small g. `device`: the suite's test device (cuda where available)."""
    return WorkerConfig(
        device=device,  # type: ignore[arg-type]
        # The model these tests were written against (the worker's default seed until the
        # defaults moved to the run config): greedy comparisons across batch shapes
        # (test_cached_generation) need a model without near-ties at the compared steps, where
        # BLAS rounding between a batch of 6 and of 1 could flip the argmax.
        seed=1234,
        micro_batch_size=mbs,
        ddp=DDPSection(overlap_grad_reduce=overlap, overlap_param_gather=overlap, bucket_size=4000),
        optimizer=OptimizerSection(lr=1e-2, adam_eps=eps, use_distributed_optimizer=True),
        max_grad_norm=clip,
        loss=ClippedPGLossConfig(token_level_loss=level == "token"),
    )


def seeded(seed: int) -> torch.Generator:
    """A seeded sampling generator on the test device (the worker refuses one on another)."""
    return torch.Generator(device=TEST_DEVICE).manual_seed(seed)


def global_batch(rows: int = 8, seed: int = 0) -> dict[str, torch.Tensor]:
    """Right-padded sequences with UNEVEN valid-token counts, a masked-out sample, advantages
    and off-policy old logprobs (so the clipped ratio matters)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (rows, SEQ), generator=g)
    lengths = torch.randint(3, SEQ + 1, (rows,), generator=g)
    attn = (torch.arange(SEQ)[None, :] < lengths[:, None]).float()
    prompt = torch.randint(1, 3, (rows,), generator=g)
    token_mask = attn * (torch.arange(SEQ)[None, :] >= prompt[:, None]).float()
    sample_mask = torch.ones(rows)
    sample_mask[1] = 0.0
    return {
        "input_ids": ids * attn.long(),
        "attention_mask": attn,
        "token_mask": token_mask,
        "sample_mask": sample_mask,
        "advantages": torch.randn(rows, generator=g),
        # [B, S] aligned with input_ids (get_logprobs' layout); position 0 is unused.
        "prev_logprobs": -4.2 + 0.3 * torch.randn(rows, SEQ, generator=g),
    }


def rank_slice(batch: dict[str, torch.Tensor], rank: int, world: int) -> dict[str, torch.Tensor]:
    """This DP rank's contiguous rows."""
    rows = batch["input_ids"].shape[0] // world
    return {k: v[rank * rows : (rank + 1) * rows] for k, v in batch.items()}


def independent_count(batch: dict[str, torch.Tensor], level: LossLevel) -> float:
    """The step's normaliser by hand, NOT through `mcore_grpo.worker.batch.valid_count` (the
    code under test): trained next-token positions (response tokens after position 0) of
    kept samples at token level, kept samples at sequence level."""
    if level == "token":
        return float((batch["token_mask"][:, 1:] * batch["sample_mask"][:, None]).sum())
    return float(batch["sample_mask"].sum())


def _grad_of(name: str, param: torch.Tensor) -> torch.Tensor:
    """A copy of `param`'s gradient; a parameter the loss never reached is a broken test."""
    if param.grad is None:
        raise AssertionError(f"reference step: parameter {name} got no gradient")
    return param.grad.detach().clone()


def reference_step(
    worker: MegatronPolicyWorker,
    initial: dict[str, torch.Tensor],
    batch: dict[str, torch.Tensor],
    steps: int = 1,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Plain PyTorch: same weights, whole global batch, loss = sum / global count, torch optimizer.
    Returns (grads of the last step, updated params) by parameter name."""
    cfg = worker.config
    o = cfg.optimizer
    device = cfg.torch_device
    batch = {k: v.to(device) for k, v in batch.items()}
    initial = {k: v.to(device) for k, v in initial.items()}
    with cpu_device(cfg.device):
        _, ref = build_gpt(cfg)
        _load_in_place(ref, initial)
        opt: torch.optim.Optimizer = (
            torch.optim.Adam(
                ref.parameters(), lr=o.lr, betas=(o.adam_beta1, o.adam_beta2), eps=o.adam_eps
            )
            if o.optimizer == "adam"
            else torch.optim.SGD(ref.parameters(), lr=o.lr)
        )
        for _ in range(steps):
            opt.zero_grad()
            logits = reference_logits(ref, batch["input_ids"], batch["attention_mask"])
            logprobs = next_token_logprobs(logits, batch["input_ids"], cfg.model.vocab_size)
            count = independent_count(batch, cfg.loss.level)
            loss = (
                grpo_loss.loss_sum(logprobs, batch, grpo_loss.policy_gradient_only(cfg.loss))
                / count
            )
            loss.backward()
            grads = {n: _grad_of(n, p) for n, p in ref.named_parameters()}
            opt.step()
    return grads, {n: p.detach().clone() for n, p in ref.named_parameters()}


def reference_loss(
    worker: MegatronPolicyWorker, initial: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]
) -> float:
    """Plain PyTorch: the loss of the WHOLE global batch at the `initial` weights, divided by
    `independent_count` (what one optimizer step's `global_loss` must report on every rank)."""
    cfg = worker.config
    batch = {k: v.to(cfg.torch_device) for k, v in batch.items()}
    with cpu_device(cfg.device), torch.no_grad():
        _, ref = build_gpt(cfg)
        _load_in_place(ref, initial)
        logits = reference_logits(ref, batch["input_ids"], batch["attention_mask"])
        logprobs = next_token_logprobs(logits, batch["input_ids"], cfg.model.vocab_size)
        total = grpo_loss.loss_sum(logprobs, batch, grpo_loss.policy_gradient_only(cfg.loss))
    return float(total) / independent_count(batch, cfg.loss.level)


def local_grad_diff(worker: MegatronPolicyWorker, ref_grads: dict[str, torch.Tensor]) -> float:
    """Max |grad - ref| over this rank's reduced shard of every DDP grad buffer bucket."""
    ddp = worker.policy.ddp
    names = {p: n for n, p in worker.policy.gpt.named_parameters()}
    dp_size, dp_rank = worker.layout.dp_size, worker.layout.dp_rank
    worst = 0.0
    for buf in ddp.buffers:
        ref_flat = torch.zeros_like(buf.grad_data)
        for param, (start, end, _) in buf.param_index_map.items():
            ref_flat[start:end] = ref_grads[names[param]].reshape(-1)
        for bucket in buf.buckets:
            n = bucket.grad_data.numel() // dp_size
            lo = bucket.offset + dp_rank * n
            got = buf.grad_data[lo : lo + n].float()
            worst = max(worst, (got - ref_flat[lo : lo + n].float()).abs().max().item())
    return worst


def param_diff(worker: MegatronPolicyWorker, ref_params: dict[str, torch.Tensor]) -> float:
    """Max |param - ref| over all parameters (after the worker's param sync)."""
    return max(
        (p.detach() - ref_params[n].to(p.device)).abs().max().item()
        for n, p in worker.policy.gpt.named_parameters()
    )


def _child(rank: int, world: int, port: int, fn: Callable[[], Any], out: Any) -> None:
    """One rank: `fn`'s result as `torch.save` bytes (a tensor put on the queue as itself
    travels through shared memory that dies with this process, which may exit before the
    parent reads it), or its traceback."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world)
    )
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        payload = io.BytesIO()
        torch.save(fn(), payload)
        out.put((rank, "ok", payload.getvalue()))
    except BaseException:
        out.put((rank, "error", traceback.format_exc()))
    finally:
        dist.destroy_process_group()


def spawn2(fn: Callable[[], Any], port: int) -> dict[int, Any]:
    """Run `fn` on 2 gloo ranks (one spawn); results by rank; a rank's traceback raises."""
    return spawn_ranks(fn, port, world=2)


def spawn_ranks(fn: Callable[[], Any], port: int, world: int) -> dict[int, Any]:
    """Run `fn` on `world` gloo ranks, each a process forked from the suite's warm server
    (tests/support/warm_spawn.py: megatron-core and Bridge imported once per pytest run, not
    once per rank); results by rank. Once a rank raises or exits
    without a result (a crash, `os._exit`, the OOM killer), the others get a few seconds to
    report, then are killed, and the test fails naming every failed rank: the ones that died
    (exit code) first, as a peer's gloo error only echoes them, then each traceback.

    The ranks build CPU workers, so on a CUDA machine the calling test is skipped with the
    reason (a test that spawns is CPU-only by nature, marked or not)."""
    if torch.cuda.is_available():
        pytest.skip(f"CPU-only by nature: {MULTI_RANK_CPU}")
    ctx = warm_spawn.context()
    out = ctx.Queue()
    child = warm_spawn.with_environment(_child, dict(os.environ))
    procs = [ctx.Process(target=child, args=(r, world, port, fn, out)) for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    raised: dict[int, str] = {}
    deadline = float("inf")
    while len(results) + len(raised) < world and time.monotonic() < deadline:
        try:
            rank, status, value = out.get(timeout=0.5)
        except queue.Empty:
            if deadline == float("inf") and _died(procs, results, raised, {0}):
                deadline = time.monotonic() + FAILURE_GRACE_S
            continue
        if status == "ok":
            results[rank] = torch.load(io.BytesIO(value), weights_only=False)
        else:
            raised[rank] = value
        if status != "ok" and deadline == float("inf"):
            deadline = time.monotonic() + FAILURE_GRACE_S
    failed = len(results) < world
    killed = {rank for rank, p in enumerate(procs) if failed and p.is_alive()}
    for rank, p in enumerate(procs):
        if rank in killed:
            p.kill()  # waiting in a collective for a peer that is gone
        p.join(60)
    if not failed:
        return results
    lines = [
        f"rank {rank} exited with code {code} before reporting a result"
        for rank, code in _died(procs, results, raised, set())
        if rank not in killed
    ]
    lines += [f"rank {rank} failed:\n{tb}" for rank, tb in sorted(raised.items())]
    raise AssertionError("\n".join(lines) or "the ranks were killed before reporting")


FAILURE_GRACE_S = 5.0  # how long the other ranks get to report once one rank failed


def _died(
    procs: list[Any], results: dict[int, Any], raised: dict[int, str], ignore: set[int]
) -> list[tuple[int, int]]:
    """(rank, exit code) of each rank that ended without reporting anything; exit codes in
    `ignore` are not counted (a clean exit may be a result still in the queue's pipe)."""
    return [
        (rank, p.exitcode)
        for rank, p in enumerate(procs)
        if rank not in results
        and rank not in raised
        and p.exitcode is not None
        and p.exitcode not in ignore
    ]


class EagerCudaGraphManager(torch.nn.Module):
    """CPU stand-in for megatron's CudaGraphManager (its constructor needs a CUDA stream).

    `TransformerLayer.__call__` routes through `self.cudagraph_manager(self, args, kwargs)`
    while the attribute exists (megatron/core/transformer/module.py:342); this runs the layer
    eagerly instead of replaying a graph. Being an nn.Module attribute, it is a submodule, which
    is what the DDP forward pre-hooks get registered on."""

    def forward(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
        return torch.nn.Module.__call__(module, *args, **kwargs)


def cpu_cuda_graph_toggle(model: torch.nn.Module, set_to: str) -> None:
    """What `toggle_cuda_graphs(model, set_to)` does to TransformerLayers, with the stand-in:
    "local" attaches a `cudagraph_manager` submodule, "none" deletes it."""
    from megatron.core.transformer.transformer_layer import TransformerLayer

    # Typed as plain modules: the stand-in is not the CudaGraphManager the layer declares.
    layers: list[torch.nn.Module] = [m for m in model.modules() if isinstance(m, TransformerLayer)]
    for layer in layers:
        if set_to == "local":
            layer.cudagraph_manager = EagerCudaGraphManager()
        elif hasattr(layer, "cudagraph_manager"):
            delattr(layer, "cudagraph_manager")


def prompts(
    rows: int = 4, length: int = 5, seed: int = 3, vocab: int = VOCAB
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts of lengths 2..length."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (rows, length), generator=g)
    lengths = torch.tensor([length - (i % (length - 1)) for i in range(rows)])
    mask = (torch.arange(length)[None, :] >= (length - lengths)[:, None]).long()
    return ids * mask, mask


def assert_same_generation(
    a: GenerationOutput, b: GenerationOutput, temperature: float = 1.0
) -> None:
    """Same tokens, masks and lengths; logprobs within 1e-5 at the logit scale.

    The logprobs are of logits / temperature, so an fp32 rounding difference e between the two
    paths' logits shows as e / temperature (x 1e4 at GREEDY): comparing at the logit scale
    keeps the bound's meaning independent of the CPU's matmul kernels.
    """
    assert torch.equal(a.output_ids, b.output_ids)
    assert torch.equal(a.attention_mask, b.attention_mask)
    assert torch.equal(a.generated_mask, b.generated_mask)
    assert torch.equal(a.generation_lengths, b.generation_lengths)
    assert float((a.logprobs - b.logprobs).abs().max()) * temperature <= 1e-5
