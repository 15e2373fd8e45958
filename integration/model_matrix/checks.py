"""The checks of one matrix row, on one rank of an initialised gloo group, through the worker.

Each goes through the worker's own path (`worker.model.build_gpt` for the import,
`worker.hf_export.export_hf` for the export, `MegatronPolicyWorker.train` with the GRPO loss for
the step), so the matrix says what a user's run would do, not what a side path does. The
oracle is `transformers`: its logits from the same files, fp32 (with `oracle`'s corrections
where the pinned release is measured wrong).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from mcore_grpo.worker.config import ModelConfig, ParallelConfig, WorkerConfig
from mcore_grpo.worker.moe_metrics import TRACKED, RouterStats

TOKENS_SHAPE = (2, 12)


def tokens(vocab: int) -> torch.Tensor:
    """The fixed input every logits comparison runs on."""
    return torch.randint(0, vocab, TOKENS_SHAPE, generator=torch.Generator().manual_seed(1))


@functools.lru_cache(maxsize=4)
def transformers_logits(checkpoint: Path, vocab: int) -> torch.Tensor:
    """The oracle: `transformers`' fp32 logits of `tokens` from `checkpoint` (a checkpoint is
    written once, so a row's layouts and its export check load it once per rank)."""
    from transformers import AutoModelForCausalLM

    from model_matrix import families, oracle

    arch = families.architecture(checkpoint)
    options = {"attn_implementation": oracle.ATTENTION[arch]} if arch in oracle.ATTENTION else {}
    with torch.no_grad(), oracle.corrected(arch):
        model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32, **options)
        return model.eval()(tokens(vocab)).logits


def worker_config(
    checkpoint: Path, tp: int, ep: int, vocab: int, sequence_parallel: bool = False
) -> WorkerConfig:
    """The fp32 CPU worker config of `checkpoint` (`vocab` ids) at TP=`tp` x EP=`ep`, with
    sequence parallelism at TP > 1 where asked (an MoE family trained: megatron-core's MoE layer
    and the worker's config refuse TP > 1 without it) and for the architectures
    `families.SEQUENCE_PARALLEL` names."""
    from model_matrix import families

    sequence_parallel = tp > 1 and (
        sequence_parallel or families.architecture(checkpoint) in families.SEQUENCE_PARALLEL
    )
    return WorkerConfig(
        device="cpu",
        model=ModelConfig(hf_checkpoint=str(checkpoint), vocab_size=vocab),
        parallel=ParallelConfig(
            tensor_model_parallel_size=tp,
            expert_model_parallel_size=ep,
            expert_tensor_parallel_size=1,
            sequence_parallel=sequence_parallel,
        ),
    )


@contextlib.contextmanager
def imported_model(
    checkpoint: Path, tp: int, ep: int, vocab: int, sequence_parallel: bool = False
) -> Iterator[tuple[WorkerConfig, Any]]:
    """The model Bridge builds from `checkpoint` at `tp` x `ep` (eval mode, no_grad), with the
    model-parallel state it needs for the block (`sequence_parallel`: `worker_config`'s)."""
    from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
    from mcore_grpo.worker.model import build_gpt
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tp, expert_model_parallel_size=ep, expert_tensor_parallel_size=1
    )
    try:
        model_parallel_seed(0, "cpu")
        config = worker_config(checkpoint, tp, ep, vocab, sequence_parallel)
        with cpu_device("cpu"), torch.no_grad():
            gpt = build_gpt(config)[1]
            # Inference: megatron-core refuses an MoE layer at TP > 1 without sequence
            # parallelism in training mode only.
            gpt.eval()
            yield config, gpt
    finally:
        parallel_state.destroy_model_parallel()


def megatron_logits(gpt: Any, vocab: int) -> torch.Tensor:
    """The worker's forward (`policy_logits`, gathered over TP) on `tokens`, real vocab only."""
    from mcore_grpo.worker.packed_rows import policy_logits

    ids = tokens(vocab)
    return policy_logits(gpt, ids, torch.ones_like(ids, dtype=torch.bool))[..., :vocab]


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b|; inf where the shapes differ (a wrong conversion, not a crash)."""
    if a.shape != b.shape:
        return math.inf
    return float((a - b).abs().max())


def logits_difference(checkpoint: Path, tp: int, ep: int, vocab: int) -> float:
    """max |megatron - transformers| of the imported model at `tp` x `ep` on this rank."""
    expected = transformers_logits(checkpoint, vocab)
    with imported_model(checkpoint, tp, ep, vocab) as (_, gpt):
        return max_diff(megatron_logits(gpt, vocab), expected)


def export_difference(checkpoint: Path, out: Path, tp: int, ep: int, vocab: int) -> float:
    """Move every weight of the imported model (each TP shard by its own amount; replicated
    weights alike on every rank, as training keeps them), export it to `out`, and return
    max |changed megatron - exported transformers| on this rank. The exported logits must
    also differ from the original's, or the export did not carry the change."""
    import torch.distributed as dist
    from mcore_grpo.worker.hf_export import export_hf
    from megatron.core import parallel_state

    with imported_model(checkpoint, tp, ep, vocab) as (config, gpt):
        shard = torch.Generator().manual_seed(100 + parallel_state.get_tensor_model_parallel_rank())
        replica = torch.Generator().manual_seed(99)
        for param in gpt.parameters():
            moves = shard if getattr(param, "tensor_model_parallel", False) else replica
            param.add_(0.05 * torch.randn(param.shape, generator=moves))
        changed = megatron_logits(gpt, vocab)
        export_hf(config, gpt, out)
    dist.barrier()
    exported = transformers_logits(out, vocab)
    if max_diff(exported, transformers_logits(checkpoint, vocab)) < 1e-3:
        raise AssertionError("the exported model has the original's logits: the change was lost")
    return max_diff(changed, exported)


def grpo_step(checkpoint: Path, tp: int, ep: int, vocab: int) -> dict[str, float]:
    """One `MegatronPolicyWorker.train` step with the GRPO loss on a fixed batch: the loss and
    how far the weights moved (largest absolute change on this rank)."""
    from mcore_grpo.grpo.algorithm import loss as grpo_loss
    from mcore_grpo.worker.policy_worker import MegatronPolicyWorker
    from megatron.core import parallel_state

    config = worker_config(checkpoint, tp, ep, vocab)
    try:
        worker = MegatronPolicyWorker(
            config, loss_sum_fn=grpo_loss.worker_default_loss(config.loss)
        )
        before = [p.detach().clone() for p in worker.policy.gpt.parameters()]
        metrics = worker.train(grpo_batch(vocab))
        moved = max(
            float((p.detach() - b).abs().max())
            for p, b in zip(worker.policy.gpt.parameters(), before, strict=True)
        )
    finally:
        parallel_state.destroy_model_parallel()
    return {"loss": float(metrics["global_loss"]), "max_weight_change": moved}


def grpo_batch(vocab: int, rows: int = 4, length: int = 12) -> dict[str, torch.Tensor]:
    """A fixed GRPO batch: prompts of 3 tokens, responses after, advantages of both signs and
    old logprobs a little off the policy's (so the clipped ratio is exercised)."""
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, vocab, (rows, length), generator=g)
    token_mask = (torch.arange(length)[None, :] >= 3).float().expand(rows, length)
    return {
        "input_ids": ids,
        "attention_mask": torch.ones(rows, length),
        "token_mask": token_mask.contiguous(),
        "sample_mask": torch.ones(rows),
        "advantages": torch.tensor([1.0, -1.0, 0.5, -0.5][:rows]),
        "prev_logprobs": -math.log(vocab) + 0.1 * torch.randn(rows, length, generator=g),
    }


SHARED_PROMPTS, SHARED_COMPLETIONS = (5, 7), ((2, 6, 4), (3, 1, 5))


def shared_prefix_difference(
    checkpoint: Path, tp: int, ep: int, vocab: int, moe: bool = False
) -> dict[str, Any]:
    """Shared-prefix rows against whole rows on two groups of three (prompts and completions
    of unequal lengths) through the worker's logprob entry: the largest logprob difference and
    the worst relative gradient difference over parameters of one weighted sum of them. For MoE
    families the forwards are training ones, so the routers' auxiliary and z losses add their
    gradients, and 'router' is the worst relative difference of the step's router metrics
    (`RouterStats`: the losses and the tokens per expert). Where the worker would not share
    (`shared_prefix.unsupported_reason`), the reason instead. An MoE family at TP > 1 runs with
    sequence parallelism, as the worker trains it."""
    from mcore_grpo.worker.logprobs import policy_token_logprobs
    from mcore_grpo.worker.shared_prefix import enable, unsupported_reason

    with (
        imported_model(checkpoint, tp, ep, vocab, sequence_parallel=moe) as (config, gpt),
        torch.enable_grad(),
        aux_loss_scale_kept(),
    ):
        reason = unsupported_reason(gpt)
        if reason is not None:
            return {"off": reason}
        enable(gpt)  # as the worker's `resolve` does: rope by the given positions, both layouts
        stats = _router_stats(gpt)
        ids, valid = shared_prefix_batch(vocab)
        scored = valid[:, :-1] & valid[:, 1:]
        weights = torch.randn(scored.shape, generator=torch.Generator().manual_seed(3)) * scored
        logprobs, grads, tokens_forwarded, router = {}, {}, {}, {}
        try:
            for shared in (True, False):
                logprobs[shared], logits = policy_token_logprobs(gpt, ids, valid, config, shared)
                tokens_forwarded[shared] = logits.shape[0] * logits.shape[1]
                (logprobs[shared] * weights).sum().backward()
                grads[shared] = reduced_grads(gpt)
                gpt.zero_grad(set_to_none=True)
                if stats is not None:
                    router[shared] = stats.collect(None, ids.device)
        finally:
            if stats is not None:
                stats.close()
        if grads[True].keys() != grads[False].keys():
            raise AssertionError("shared and whole rows reached different parameters")
        gradients = gradient_difference(gpt, grads[True], grads[False])  # a TP collective
    if tokens_forwarded[True] >= tokens_forwarded[False]:
        raise AssertionError(f"nothing was shared: {tokens_forwarded} columns forwarded")
    figures = {
        "logprobs": float((logprobs[True] - logprobs[False])[scored].abs().max()),
        "gradients": gradients,
    }
    if router:
        figures["router"] = router_difference(router[True], router[False])
    return figures


def reduced_grads(gpt: Any) -> dict[str, torch.Tensor]:
    """Every parameter's gradient, summed over the ranks that hold a replica of it: a
    parameter not split over TP (norms, routers, q/k layernorms, MLA's down projections) over
    the TP group, an expert replicated over TP (expert TP 1) over the expert-data-parallel
    group. Such a replica's gradient on one rank covers that rank's slice of the columns
    (sequence parallelism) or of the heads, and the shared and whole rows split their tokens
    over the ranks differently: only the sums are the same, as megatron-core's
    `finalize_model_grads` and DDP reduce them (where it averages instead, or the replicas saw
    the same tokens, the sum scales both sides alike)."""
    from megatron.core import parallel_state

    grads = {}
    for name, param in gpt.named_parameters():
        if param.grad is None:
            continue
        grad = param.grad.detach().clone()
        if not getattr(param, "allreduce", True):
            group = parallel_state.get_expert_data_parallel_group()
            torch.distributed.all_reduce(grad, group=group)
        elif not getattr(param, "tensor_model_parallel", False):
            group = parallel_state.get_tensor_model_parallel_group()
            torch.distributed.all_reduce(grad, group=group)
        grads[name] = grad
    return grads


def gradient_difference(
    gpt: Any, got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]
) -> float:
    """The worst relative difference ‖got - expected‖ / ‖expected‖ over parameters, each whole:
    a parameter split over TP by its norms over all the ranks' shards (one rank's shard of a
    per-head parameter may hold only heads of tiny gradient, where fp32 rounding weighs more)."""
    from megatron.core import parallel_state

    sharded = {n for n, p in gpt.named_parameters() if getattr(p, "tensor_model_parallel", False)}
    worst = 0.0
    for name, value in got.items():
        norms = torch.stack(
            [(value - expected[name]).square().sum(), expected[name].square().sum()]
        )
        if name in sharded:
            group = parallel_state.get_tensor_model_parallel_group()
            torch.distributed.all_reduce(norms, group=group)
        worst = max(worst, float(norms[0].sqrt() / norms[1].sqrt().clamp(min=1e-12)))
    return worst


@contextlib.contextmanager
def aux_loss_scale_kept() -> Iterator[None]:
    """megatron-core's `MoEAuxLossAutoScaler` keeps one class-wide loss scale, created by the
    first backward through a router's losses (a 0-d 1.0) when no schedule set it; the schedule
    later copies its own [1] scale into it, which a 0-d tensor refuses. A backward outside the
    schedule (this module's checks, tests) puts the scale back as it found it."""
    from megatron.core.transformer.moe.moe_utils import MoEAuxLossAutoScaler

    saved = MoEAuxLossAutoScaler.main_loss_backward_scale
    try:
        yield
    finally:
        MoEAuxLossAutoScaler.main_loss_backward_scale = saved


ROUTER_METRICS = (*TRACKED.values(), "moe/tokens_per_expert")


def _router_stats(gpt: Any) -> Any:
    """For an MoE model: training mode (the routers' losses exist in training forwards only)
    and `RouterStats` counting its routers; None for a dense model (left in eval mode)."""
    moe = gpt.config.num_moe_experts
    if not moe:
        return None
    gpt.train()
    stats = RouterStats(gpt, moe, gpt.config.moe_router_topk)
    stats.reset()
    return stats


def router_difference(got: dict[str, Any], expected: dict[str, Any]) -> float:
    """Worst relative difference over the router metrics (each tokens-per-expert count apart)."""
    worst = 0.0
    for name in ROUTER_METRICS:
        a = torch.tensor(got[name], dtype=torch.float64).flatten()
        b = torch.tensor(expected[name], dtype=torch.float64).flatten()
        worst = max(worst, float(((a - b).abs() / b.abs().clamp(min=1e-12)).max()))
    return worst


def shared_prefix_batch(
    vocab: int,
    prompts: tuple[int, ...] = SHARED_PROMPTS,
    completions: tuple[tuple[int, ...], ...] = SHARED_COMPLETIONS,
    width: int | None = None,
    seed: int = 5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """[rows, width] ids and valid: per group a left-padded prompt (`prompts`), then each row's
    completion (`completions`, one tuple per group), right-padded; `width` at least the
    longest row (default: exactly)."""
    g = torch.Generator().manual_seed(seed)
    start = max(prompts)
    width = width or start + max(max(c) for c in completions)
    rows = sum(len(c) for c in completions)
    ids = torch.zeros(rows, width, dtype=torch.long)
    valid = torch.zeros(rows, width, dtype=torch.bool)
    row = 0
    for prompt, lengths in zip(prompts, completions, strict=True):
        prompt_ids = torch.randint(1, vocab, (prompt,), generator=g)
        for length in lengths:
            ids[row, start - prompt : start] = prompt_ids
            ids[row, start : start + length] = torch.randint(1, vocab, (length,), generator=g)
            valid[row, start - prompt : start + length] = True
            row += 1
    return ids, valid
