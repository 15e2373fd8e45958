"""The GRPO policy worker: NeMo-RL's worker method names, composed from the small pieces.

Phase contract (see docs/worker.md): every entry point first asks the `PhaseGuard`; the
`prepare_for_*` / `offload_*` / `finish_generation` steps are the only phase transitions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import torch
import torch.distributed as dist

from mcore_grpo.worker.batch import Batch, LossSumFn, batch_to
from mcore_grpo.worker.config import WorkerConfig
from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
from mcore_grpo.worker.engine_lifecycle import (
    EngineState,
    SuspendableEngine,
    SynchronizedEngineLifecycle,
)
from mcore_grpo.worker.generation import GenerationOutput, SamplingParams, generate
from mcore_grpo.worker.logprobs import policy_token_logprobs
from mcore_grpo.worker.lr_schedule import lr_at
from mcore_grpo.worker.memory.offload import (
    Offloader,
    OffloadReport,
    destroy_process_groups,
    reload_process_groups,
)
from mcore_grpo.worker.memory.process_group_rebind import GroupSnapshot, rebind_groups
from mcore_grpo.worker.model import PolicyModel, build_policy, sync_params
from mcore_grpo.worker.parallel import init_distributed, init_model_parallel
from mcore_grpo.worker.phase_guard import Phase, PhaseGuard
from mcore_grpo.worker.reference import ReferencePolicy
from mcore_grpo.worker.sampling import SamplingGenerator
from mcore_grpo.worker.train_step import SplitTrainStep

P = ParamSpec("P")
R = TypeVar("R")
EntryPoint = Callable[Concatenate["MegatronPolicyWorker", P], R]
CudaGraphToggle = Callable[[torch.nn.Module, str], None]

T, LP, GEN, OFF = Phase.TRAINING, Phase.LOGPROB_INFERENCE, Phase.GENERATION, Phase.OFFLOADED
ON_DEVICE = (T, LP, GEN)


def _entry(
    *allowed: Phase, tensor_redirects: bool = True
) -> Callable[[EntryPoint[P, R]], EntryPoint[P, R]]:
    """Entry point: check the phase, then run inside the CPU redirects (when configured);
    `tensor_redirects`: see `cpu.cpu_device`."""

    def wrap(method: EntryPoint[P, R]) -> EntryPoint[P, R]:
        @functools.wraps(method)
        def run(self: MegatronPolicyWorker, *args: P.args, **kwargs: P.kwargs) -> R:
            if allowed:
                self.guard.require(method.__name__, *allowed)
            with cpu_device(self.config.device, tensor_redirects):
                return method(self, *args, **kwargs)

        return run

    return wrap


def megatron_cuda_graph_toggle(model: torch.nn.Module, set_to: str) -> None:
    """megatron-core's own toggle (adds/deletes `cudagraph_manager` submodules); GPU only."""
    from megatron.core.transformer.utils import toggle_cuda_graphs

    toggle_cuda_graphs(model, set_to=set_to)


class MegatronPolicyWorker:
    """One rank's policy: train, logprobs, reference logprobs, generation, offload."""

    def __init__(
        self,
        config: WorkerConfig,
        cuda_graph_toggle: CudaGraphToggle | None = None,
        loss_sum_fn: LossSumFn | None = None,
        generation_engine: SuspendableEngine | None = None,
    ) -> None:
        """`loss_sum_fn`: the training loss (contract: `mcore_grpo.worker.batch.LossSumFn`);
        it comes from above (the GRPO loss: `mcore_grpo.grpo.algorithm.loss.worker_default_loss`); None =
        no loss yet (set `loss_sum_fn` before training; training without one refuses).

        `generation_engine`: an engine that holds device memory between generations (e.g.
        megatron-core's DynamicInferenceEngine on GPU). It is resumed by
        `prepare_for_generation` and suspended on leaving generation, on all ranks together
        (`SynchronizedEngineLifecycle`)."""
        self.config = config.validate()
        self.guard = PhaseGuard(Phase.TRAINING)
        # Generation-time CUDA graphs: None = off. On CPU tests inject a stand-in toggle.
        self.cuda_graph_toggle = cuda_graph_toggle
        init_distributed(self.config)
        self.layout = init_model_parallel(self.config)
        with cpu_device(self.config.device):
            model_parallel_seed(self.config.seed, self.config.device)
            self.policy: PolicyModel = build_policy(self.config)
            self.reference = ReferencePolicy(self.policy)
        self.train_step = SplitTrainStep(self.policy, self.config, loss_sum_fn)
        self.offloader = Offloader(self.policy)
        self._group_snapshot: tuple[Any, GroupSnapshot] | None = None
        self.groups_rebound = 0
        self.engine_lifecycle: SynchronizedEngineLifecycle | None = None
        if generation_engine is not None:
            # megatron-core's engine starts running; the worker starts in training, so the
            # engine's KV cache and CUDA graphs are freed now, on every rank together.
            self.engine_lifecycle = SynchronizedEngineLifecycle(
                generation_engine, state=EngineState.SERVING
            )
            self.engine_lifecycle.suspend()

    # ---- training -------------------------------------------------------------------
    @property
    def loss_sum_fn(self) -> LossSumFn:
        """The loss `train`/`train_microbatch` differentiate; settable between steps."""
        return self.train_step.loss_sum_fn

    @loss_sum_fn.setter
    def loss_sum_fn(self, fn: LossSumFn) -> None:
        self.train_step.loss_sum_fn = fn

    @_entry(T)
    def train(self, batch: Batch) -> dict[str, Any]:
        """One optimizer step over this rank's slice of the global batch."""
        return self.train_step.train(batch_to(batch, self.device))

    def set_schedule(self, completed_steps: int) -> float:
        """Learning rate and weight decay for the GRPO step after `completed_steps` (the
        configured schedule); the learning rate it trains with. Without a schedule: `lr`."""
        if self.policy.scheduler is None:
            return self.config.optimizer.lr
        return lr_at(self.policy.scheduler, completed_steps)

    @_entry(T)
    def begin_train_step(self) -> None:
        """Open a split train step (see `SplitTrainStep.begin`)."""
        self.train_step.begin()

    @_entry(T)
    def train_microbatch(self, batch: Batch) -> None:
        """Accumulate one chunk's gradient sums (no reduction)."""
        self.train_step.train_microbatch(batch_to(batch, self.device))

    @_entry(T)
    def finish_train_step(self) -> dict[str, Any]:
        """Normalise, reduce once, step."""
        return self.train_step.finish()

    @_entry()
    def abort_train_step(self) -> None:
        """Drop an open step (idempotent, any phase)."""
        self.train_step.abort()

    # ---- inference ------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """Where this rank's model, batches and outputs live (`WorkerConfig.torch_device`)."""
        return self.config.torch_device

    @torch.no_grad()
    def _logprobs(self, batch: Batch) -> torch.Tensor:
        """fp32 logprobs (the bf16 model's logits come out of `Float16Module` in fp32). A batch
        with a `token_mask` (NeMo-RL's train data: the trained tokens) gets them only there,
        0 elsewhere: the losses and metrics that compare with them read no other."""
        batch = batch_to(batch, self.device)
        ddp = self.policy.ddp
        scored = batch["token_mask"][:, 1:] > 0 if "token_mask" in batch else None
        ddp.eval()
        try:
            lp, _ = policy_token_logprobs(
                ddp,
                batch["input_ids"],
                batch["attention_mask"],
                self.config,
                self.policy.shared_prefix,
                scored,
            )
        finally:
            ddp.train()
        # NeMo-RL layout: aligned with input_ids, position 0 has no logprob.
        return torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)

    @_entry(LP, T)
    def get_logprobs(self, batch: Batch) -> torch.Tensor:
        """[B, S] policy logprobs of input_ids (0 at position 0)."""
        return self._logprobs(batch)

    @_entry(LP, T)
    def get_reference_policy_logprobs(self, batch: Batch) -> torch.Tensor:
        """[B, S] reference-policy logprobs, policy weights restored afterwards."""
        with self.reference.swapped_in(self.policy):
            return self._logprobs(batch)

    # Sampling names no CUDA device itself (megatron's inference buffers come from the
    # replaced torch.cuda.current_device), so it runs without the per-call tensor redirects.
    @_entry(GEN, tensor_redirects=False)
    def generate(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        params: SamplingParams,
        generator: SamplingGenerator = None,
    ) -> GenerationOutput:
        """Sample continuations of left-padded prompts with the current policy.

        With a generation engine attached, refuses unless all ranks agreed it is serving.

        Raises ValueError if `params.temperature` is not `WorkerConfig.temperature`: the
        logprob and training forwards score at the config's temperature, and a sample drawn at
        another one would make every importance ratio wrong without any error.
        """
        if params.temperature != self.config.temperature:
            raise ValueError(
                f"SamplingParams.temperature={params.temperature} but WorkerConfig.temperature="
                f"{self.config.temperature}: the logprob and training forwards score at the "
                "config's temperature; set both to the same value"
            )
        if generator is not None and generator.device.type != self.device.type:
            raise ValueError(
                f"generate: the sampling generator is on {generator.device} but the worker "
                f"runs on {self.device}; create it with torch.Generator(device=worker.device)"
            )
        if self.engine_lifecycle is not None:
            self.engine_lifecycle.require_serving("generate")
        self.policy.ddp.eval()
        return generate(
            self.policy.ddp,
            prompt_ids.to(self.device),
            prompt_mask.to(self.device),
            params,
            self.config.model.vocab_size,
            generator,
        )

    # ---- phase transitions ----------------------------------------------------------
    def _suspend_engine(self) -> None:
        """Leaving generation: the engine stops serving on all ranks (no-op if suspended)."""
        if self.engine_lifecycle is not None:
            self.engine_lifecycle.suspend()

    def _ensure_on_device(self) -> None:
        if self._group_snapshot is not None:
            self.reload_process_groups()
        if self.offloader.is_offloaded:
            self.offloader.onload()

    @_entry()
    def prepare_for_training(self) -> None:
        """Weights, grads and optimizer state on device; train mode."""
        self._suspend_engine()
        self._ensure_on_device()
        self.policy.ddp.train()
        self.guard.enter(T)

    @_entry()
    def prepare_for_lp_inference(self) -> None:
        """Weights on device and current (param sync); eval-ready."""
        self._suspend_engine()
        self._ensure_on_device()
        sync_params(self.policy)
        self.guard.enter(LP)

    @_entry()
    def prepare_for_generation(self) -> None:
        """Sync params, switch generation CUDA graphs on, keep the DDP hook invariant."""
        self._ensure_on_device()
        ddp = self.policy.ddp
        hooks = bool(getattr(ddp, "remove_forward_pre_hook_handles", None))
        if hooks:
            ddp.disable_forward_pre_hook(param_sync=True)
        else:
            sync_params(self.policy)
        if self.cuda_graph_toggle is not None:
            self.cuda_graph_toggle(self.policy.gpt, "local")
        if hooks:
            # Hooks are enabled outside the reference swap; re-registering here also covers
            # the cudagraph_manager submodules the toggle just added.
            ddp.enable_forward_pre_hook()
        if self.engine_lifecycle is not None:
            # After the param sync: the engine serves the refitted weights, on every rank.
            self.engine_lifecycle.resume()
        self.guard.enter(GEN)

    @_entry(GEN)
    def finish_generation(self) -> None:
        """Suspend the engine on all ranks; switch generation CUDA graphs off."""
        self._suspend_engine()
        if self.cuda_graph_toggle is not None:
            self.cuda_graph_toggle(self.policy.gpt, "none")
        self.guard.enter(LP)

    @_entry(*ON_DEVICE)
    def offload_before_refit(self) -> OffloadReport:
        """Free grads and optimizer state; the parameters stay on the device for the refit
        (NeMo-RL's worker: `move_model(..., move_params=False, move_grads=True)`)."""
        self._suspend_engine()
        self.train_step.abort()
        report = self.offloader.offload(params=False, grads=True, optimizer=True)
        self.guard.enter(OFF)
        return report

    @_entry()
    def offload_after_refit(self) -> OffloadReport:
        """Free everything, parameters included."""
        self._suspend_engine()
        self.train_step.abort()
        if self.offloader.is_offloaded:
            self.offloader.onload()
        report = self.offloader.offload(grads=True, optimizer=True)
        self.guard.enter(OFF)
        return report

    @_entry(OFF)
    def offload_process_groups(self, mode: str = "manual") -> Any:
        """Destroy megatron's NCCL groups (time-sharing); rebuilt by any prepare_for_*."""
        before = GroupSnapshot.capture()
        result = destroy_process_groups(mode=mode, device=self.config.device)
        self._group_snapshot = (result, before)
        return result

    def reload_process_groups(self) -> None:
        """Rebuild the groups and point DDP/optimizer at the new group objects."""
        if self._group_snapshot is None:
            return
        result, before = self._group_snapshot
        with cpu_device(self.config.device):
            reload_process_groups(result)
            self.groups_rebound = rebind_groups(before, GroupSnapshot.capture(), self.policy)
        self._group_snapshot = None
        dist.barrier()
