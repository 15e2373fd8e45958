"""Process-group and megatron-core `parallel_state` setup from a `WorkerConfig`."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from mcore_grpo.worker.config import WorkerConfig


@dataclass(frozen=True)
class ParallelLayout:
    """This rank's place in the mesh: what the train step and logprob reductions need."""

    world_size: int
    rank: int
    dp_size: int
    dp_rank: int
    tp_size: int

    @property
    def dp_group(self) -> dist.ProcessGroup:
        """Looked up live: the NCCL-offload cycle replaces the group objects."""
        from megatron.core import parallel_state

        return parallel_state.get_data_parallel_group()


def init_distributed(config: WorkerConfig) -> None:
    """Start torch.distributed (gloo on CPU, nccl on GPU) from the usual env variables.

    No-op when the caller (torchrun, Ray, a test harness) has already initialised it; the
    rank's GPU is selected either way (`select_device`).
    """
    select_device(config)
    if dist.is_initialized():
        return
    missing = [
        k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ
    ]
    if missing:
        raise RuntimeError(
            f"torch.distributed is not initialised and {missing} are unset; run under "
            "torchrun or call torch.distributed.init_process_group before building the worker."
        )
    dist.init_process_group(backend=backend_for(config.device))


def backend_for(device: str) -> str:
    """The collective backend of a device: gloo for CPU tensors, NCCL for CUDA ones."""
    return "gloo" if device == "cpu" else "nccl"


def select_device(config: WorkerConfig) -> None:
    """On CUDA, make this rank's GPU current: ``LOCAL_RANK`` (torchrun); without it the current
    GPU stays (0 for one process per GPU, as Ray's ``num_gpus=1`` actors see it)."""
    if config.device != "cuda":
        return
    if not torch.cuda.is_available():
        raise RuntimeError(
            "WorkerConfig.device='cuda' but torch sees no CUDA device; use device='cpu' or "
            "run on a GPU machine."
        )
    if "LOCAL_RANK" in os.environ:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


def init_model_parallel(config: WorkerConfig) -> ParallelLayout:
    """Initialise megatron-core's `parallel_state` (idempotent for the same sizes)."""
    from megatron.core import parallel_state

    tp = config.parallel.tensor_model_parallel_size
    pp = config.parallel.pipeline_model_parallel_size
    world = dist.get_world_size()
    if world % (tp * pp) != 0:
        raise ValueError(
            f"world size {world} is not divisible by TP*PP = {tp}*{pp}; change "
            "WorkerConfig.parallel or the number of ranks."
        )
    if parallel_state.model_parallel_is_initialized():
        have = (
            parallel_state.get_tensor_model_parallel_world_size(),
            parallel_state.get_pipeline_model_parallel_world_size(),
        )
        if have != (tp, pp):
            raise RuntimeError(
                f"parallel_state already initialised with TP,PP={have}, config asks {(tp, pp)}; "
                "call parallel_state.destroy_model_parallel() first."
            )
    else:
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=tp,
            pipeline_model_parallel_size=pp,
            expert_model_parallel_size=config.parallel.expert_model_parallel_size,
            expert_tensor_parallel_size=config.parallel.expert_tensor_parallel_size,
            # Annotated int, used only as timedelta(minutes=...): a fraction is seconds.
            distributed_timeout_minutes=config.parallel.distributed_timeout_minutes,  # type: ignore[arg-type]
        )
    return current_layout()


def current_layout() -> ParallelLayout:
    """Read the layout from the live `parallel_state`."""
    from megatron.core import parallel_state

    return ParallelLayout(
        world_size=dist.get_world_size(),
        rank=dist.get_rank(),
        dp_size=parallel_state.get_data_parallel_world_size(),
        dp_rank=parallel_state.get_data_parallel_rank(),
        tp_size=parallel_state.get_tensor_model_parallel_world_size(),
    )
