"""What a model's parameters are, counted by megatron-core itself, with no weights: a meta build.

A dry run (`mcore-grpo --dry-run`) tells on a CPU machine, before GPUs are rented, how many
parameters each GPU of a layout holds. Counting by hand from a config drifts from what
megatron-core builds (QK norms, GQA, an untied output layer, the router, shared experts), so
the model is built for real, by megatron-core (through Megatron-Bridge's provider for a Hugging
Face config), on the ``meta`` device: every tensor's shape and parallel attributes, no storage.
Qwen3-30B-A3B (30.5 B parameters) builds in ~3 s on 2 CPU cores. The build is a world of one
(TP = EP = 1); `ParameterCount.per_rank` then splits it the way megatron-core shards it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from mcore_grpo.worker.config import WorkerConfig

# Fused kernels of Transformer Engine / apex: megatron-core refuses them at config time when
# neither is installed, and a meta build runs no kernel, so the shape is the same without them.
_KERNEL_FLAGS = (
    "gradient_accumulation_fusion",
    "apply_rope_fusion",
    "bias_dropout_fusion",
    "masked_softmax_fusion",
    "bias_activation_fusion",
    "moe_grouped_gemm",
    "moe_permute_fusion",
    "moe_router_fusion",
)


@dataclass(frozen=True)
class ParameterCount:
    """A model's parameters as megatron-core shards them."""

    tp_sharded: int  # dense weights split over tensor-parallel ranks (`tensor_model_parallel`)
    replicated: int  # dense weights every TP rank holds whole (norms, router, q/k norms)
    expert: int  # routed experts' weights: split over EP x expert-TP ranks

    @property
    def total(self) -> int:
        """All parameters of the model (tied embeddings once)."""
        return self.tp_sharded + self.replicated + self.expert

    def per_rank(self, tp: int, ep: int = 1, etp: int = 1, pp: int = 1) -> tuple[int, int]:
        """(dense, expert) parameters on one GPU; layers split evenly over `pp` stages."""
        dense = (self.tp_sharded // tp + self.replicated) // pp
        return dense, self.expert // (ep * etp * pp)


def count_parameters(model: torch.nn.Module) -> ParameterCount:
    """Classify `model`'s parameters by the attributes and names megatron-core gives them."""
    sharded = replicated = expert = 0
    for name, param in model.named_parameters():
        if ".experts." in f".{name}":  # routed experts; `shared_experts` are dense
            expert += param.numel()
        elif getattr(param, "tensor_model_parallel", False):
            sharded += param.numel()
        else:
            replicated += param.numel()
    return ParameterCount(sharded, replicated, expert)


@contextlib.contextmanager
def model_parallel_world_of_one() -> Iterator[None]:
    """A gloo world of one process with megatron's model-parallel groups, for a build that
    needs them; the ones already set up by the caller are used as they are."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    owns_world = not dist.is_initialized()
    if owns_world:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    elif dist.get_world_size() != 1:
        raise RuntimeError(
            f"a meta build counts the whole model in a world of one process; this process is "
            f"one of {dist.get_world_size()} ranks: count before torch.distributed starts"
        )
    owns_groups = not parallel_state.model_parallel_is_initialized()
    if owns_groups:
        parallel_state.initialize_model_parallel()
    try:
        yield
    finally:
        if owns_groups:
            parallel_state.destroy_model_parallel()
        if owns_world:
            dist.destroy_process_group()


def _meta_provider(provider: Any) -> Any:
    """Bridge's provider set to build shapes only: no init, no fused kernels."""
    provider.use_cpu_initialization = True
    provider.perform_initialization = False
    for flag in _KERNEL_FLAGS:
        if hasattr(provider, flag):
            setattr(provider, flag, False)
    if getattr(provider, "num_moe_experts", None):
        # The alltoall dispatcher makes a CUDA stream in __init__ (megatron-core
        # transformer/moe/token_dispatcher.py); the dispatcher holds no parameters.
        provider.moe_token_dispatcher_type = "allgather"
    provider.finalize()
    return provider


def hf_parameter_count(hf_config: Any) -> ParameterCount:
    """Parameters of the Megatron model Bridge builds from a `transformers` config."""
    from mcore_grpo.worker.bridge_source import import_auto_bridge

    bridge = import_auto_bridge().from_hf_config(hf_config)
    provider = _meta_provider(bridge.to_megatron_provider(load_weights=False))
    with model_parallel_world_of_one(), torch.device("meta"):
        return count_parameters(provider.provide(pre_process=True, post_process=True))


def tiny_parameter_count(config: WorkerConfig) -> ParameterCount:
    """Parameters of the built-in GPT of `config` (TP = 1)."""
    from mcore_grpo.worker.model import construct_gpt, transformer_config

    one = dataclasses.replace(
        config.parallel, tensor_model_parallel_size=1, sequence_parallel=False
    )
    config = dataclasses.replace(config, parallel=one)
    tcfg = dataclasses.replace(
        transformer_config(config), use_cpu_initialization=True, perform_initialization=False
    )
    with model_parallel_world_of_one(), torch.device("meta"):
        return count_parameters(construct_gpt(config, tcfg))
