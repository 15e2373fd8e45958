"""The split train step: begin / train_microbatch x K / finish (or abort).

One optimizer step = exactly one cross-DP gradient reduction. Microbatches run megatron's
schedule inside `ddp.no_sync()` with the three model-config hooks that would reduce mid-step
nulled (`grad_sync_func`, `no_sync_func`, `finalize_model_grads_func`); `finish` divides the
accumulated gradient sums once by the GLOBAL valid-token (or sequence) count, then runs the
saved `finalize_model_grads_func` once. With `overlap_grad_reduce` off that finalize call IS
the reduction: calling `start_grad_sync()` before it would reduce twice. A mixture-of-experts
model's router losses and expert load come back with the step's metrics (`moe_metrics`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from mcore_grpo.worker.batch import Batch, LossSumFn, loss_mask, split_microbatches, valid_count
from mcore_grpo.worker.config import WorkerConfig
from mcore_grpo.worker.logprobs import policy_token_logprobs
from mcore_grpo.worker.model import PolicyModel
from mcore_grpo.worker.moe_metrics import RouterStats


def no_loss(_logprobs: torch.Tensor, _batch: Batch) -> torch.Tensor:
    """The loss of a worker built without one: training refuses, naming what to pass."""
    raise RuntimeError(
        "MegatronPolicyWorker has no loss: pass loss_sum_fn= when building it (the GRPO "
        "clipped policy gradient: mcore_grpo.grpo.algorithm.loss.worker_default_loss(config.loss)) or "
        "set worker.loss_sum_fn before training"
    )


def _router_stats(policy: PolicyModel) -> RouterStats | None:
    """Expert-load counters for a mixture-of-experts model (built in or through Bridge)."""
    tcfg = policy.transformer_config
    experts = getattr(tcfg, "num_moe_experts", None)
    if not experts:
        return None
    return RouterStats(policy.gpt, experts, tcfg.moe_router_topk)


@dataclass
class _OpenStep:
    """State of one open optimizer step."""

    saved_grad_sync_func: Any
    saved_no_sync_func: Any
    saved_finalize_model_grads_func: Any
    # On the worker's device: the finish all-reduce must be on a device tensor (NCCL).
    local_valid: torch.Tensor
    local_loss_sum: torch.Tensor
    num_microbatches: int = 0
    failed: str | None = None


class SplitTrainStep:
    """Owns the open-step state; the worker's train entry points delegate here."""

    def __init__(
        self, policy: PolicyModel, config: WorkerConfig, loss_sum_fn: LossSumFn | None = None
    ) -> None:
        self._policy = policy
        self._config = config
        self._open: _OpenStep | None = None
        # The loss comes from above (the algorithm); the worker never imports it.
        self._loss_sum_fn = loss_sum_fn if loss_sum_fn is not None else no_loss
        self._router_stats = _router_stats(policy)

    @property
    def loss_sum_fn(self) -> LossSumFn:
        """The loss the microbatches differentiate (contract: see `LossSumFn`)."""
        return self._loss_sum_fn

    @loss_sum_fn.setter
    def loss_sum_fn(self, fn: LossSumFn) -> None:
        if not callable(fn):
            raise TypeError(
                f"loss_sum_fn must be callable (logprobs, microbatch) -> sum, got {fn!r}"
            )
        if self._open is not None:
            raise RuntimeError(
                "loss_sum_fn: a train step is open; one optimizer step must differentiate one "
                "loss. Set it before begin_train_step() or after finish/abort_train_step()."
            )
        self._loss_sum_fn = fn

    @property
    def is_open(self) -> bool:
        """Whether a step is open (begun and neither finished nor aborted)."""
        return self._open is not None

    def begin(self) -> None:
        """Open a step: zero grads, save and null the mid-step reduce hooks."""
        if self._open is not None:
            raise RuntimeError(
                "begin_train_step: a train step is already open; call finish_train_step() "
                "or abort_train_step() first."
            )
        ddp, cfg = self._policy.ddp, self._policy.transformer_config
        ddp.train()
        if self._router_stats is not None:
            self._router_stats.reset()
        ddp.zero_grad_buffer()
        self._policy.optimizer.zero_grad()
        self._open = _OpenStep(
            saved_grad_sync_func=cfg.grad_sync_func,
            saved_no_sync_func=cfg.no_sync_func,
            saved_finalize_model_grads_func=cfg.finalize_model_grads_func,
            local_valid=torch.zeros((), dtype=torch.float64, device=self._config.torch_device),
            local_loss_sum=torch.zeros((), dtype=torch.float64, device=self._config.torch_device),
        )
        cfg.grad_sync_func = None
        cfg.no_sync_func = contextlib.nullcontext
        cfg.finalize_model_grads_func = None

    def _require_open(self, call: str) -> _OpenStep:
        if self._open is None:
            raise RuntimeError(f"{call}: no train step is open; call begin_train_step() first.")
        if self._open.failed is not None:
            raise RuntimeError(
                f"{call}: this train step failed in {self._open.failed}; call "
                "abort_train_step() and begin a new one."
            )
        return self._open

    def _restore_hooks(self, state: _OpenStep) -> None:
        cfg = self._policy.transformer_config
        cfg.grad_sync_func = state.saved_grad_sync_func
        cfg.no_sync_func = state.saved_no_sync_func
        cfg.finalize_model_grads_func = state.saved_finalize_model_grads_func

    def train_microbatch(self, batch: Batch) -> None:
        """Forward/backward one chunk; gradient SUMS accumulate locally, nothing is reduced."""
        state = self._require_open("train_microbatch")
        try:
            self._run_schedule(state, batch)
        except BaseException:
            state.failed = "train_microbatch"
            self._restore_hooks(state)
            raise

    def _run_schedule(self, state: _OpenStep, batch: Batch) -> None:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        mbs = self._config.micro_batch_size
        shared_prefix = self._policy.shared_prefix
        chunks = split_microbatches(batch, mbs)
        losses: list[torch.Tensor] = []

        def forward_step(data_iterator: Iterator[dict[str, torch.Tensor]], model: Any) -> Any:
            mb = next(data_iterator)
            # The LM head only where the loss reads a prediction (`scored_logits`).
            logprobs, logits = policy_token_logprobs(
                model,
                mb["input_ids"],
                mb["attention_mask"],
                self._config,
                shared_prefix,
                scored=loss_mask(mb) > 0,
            )

            def loss_func(_output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
                total = self._loss_sum_fn(logprobs, mb)
                losses.append(total.detach())
                count = valid_count(mb, self._config.loss.level).to(torch.int)
                return total, count, {"loss_sum": total.detach()}

            return logits, loss_func

        seq = batch["input_ids"].shape[1]
        with self._policy.ddp.no_sync():
            get_forward_backward_func()(
                forward_step_func=forward_step,
                data_iterator=iter(chunks),
                model=[self._policy.ddp],
                num_microbatches=len(chunks),
                seq_length=seq,
                micro_batch_size=mbs,
                forward_only=False,
            )
        # Accumulated on the device: no host sync per microbatch.
        device = self._config.torch_device
        state.local_valid = state.local_valid + valid_count(batch, self._config.loss.level).to(
            device
        )
        if losses:
            state.local_loss_sum = state.local_loss_sum + torch.stack(losses).sum().to(
                device, torch.float64
            )
        state.num_microbatches += len(chunks)

    def finish(self) -> dict[str, Any]:
        """Normalise by the global count, reduce once, step the optimizer, restore hooks."""
        state = self._require_open("finish_train_step")
        try:
            metrics = self._finish(state)
        except BaseException:
            state.failed = "finish_train_step"
            self._restore_hooks(state)
            raise
        self._restore_hooks(state)
        self._open = None
        return metrics

    def _finish(self, state: _OpenStep) -> dict[str, Any]:
        from megatron.core import parallel_state

        ddp = self._policy.ddp
        dp_group = parallel_state.get_data_parallel_group()
        # A device tensor: NCCL has no CPU backend (gloo takes the CPU one).
        totals = torch.stack([state.local_valid, state.local_loss_sum])
        dist.all_reduce(totals, group=dp_group)
        global_valid, global_loss_sum = float(totals[0]), float(totals[1])
        inv_n = 1.0 / global_valid if global_valid > 0 else 1.0
        ddp.scale_gradients(inv_n)
        finalize = state.saved_finalize_model_grads_func
        if finalize is None:
            raise RuntimeError(
                "finish_train_step: model config had no finalize_model_grads_func at begin; "
                "build the policy with mcore_grpo.worker.model.build_policy (it binds it)."
            )
        if ddp.ddp_config.overlap_grad_reduce:
            # no_sync() kept register_grad_ready from dispatching; start the one reduce here
            # so finalize's finish_grad_sync has a handle to wait on.
            ddp.start_grad_sync()
        finalize([ddp], None)
        ok, grad_norm, _ = self._policy.optimizer.step()
        metrics: dict[str, Any] = {
            "global_loss": global_loss_sum * inv_n,
            "global_valid": global_valid,
            "grad_norm": float(grad_norm) if grad_norm is not None else float("nan"),
            "update_successful": float(bool(ok)),
            "num_microbatches": float(state.num_microbatches),
        }
        if self._router_stats is not None:
            metrics.update(self._router_stats.collect(dp_group, self._config.torch_device))
        return metrics

    def abort(self) -> None:
        """Drop the open step without stepping; restore hooks. Idempotent."""
        state = self._open
        if state is None:
            return
        self._restore_hooks(state)
        self._policy.ddp.zero_grad_buffer()
        self._policy.optimizer.zero_grad()
        self._open = None

    def train(self, batch: Batch) -> dict[str, Any]:
        """One optimizer step over `batch`, built on begin / train_microbatch / finish."""
        self.begin()
        try:
            self.train_microbatch(batch)
            return self.finish()
        except BaseException:
            self.abort()
            raise
