"""Tripwire for patches/Megatron-LM/ddp-forward-pre-hook-handles.patch.

With the distributed optimizer and `overlap_param_gather=True`, megatron-core's
`DistributedDataParallel` registers a forward pre-hook on every submodule present at
`enable_forward_pre_hook()` time. `toggle_cuda_graphs(model, set_to="none")` deletes the
`cudagraph_manager` submodules of the transformer layers; unpatched,
`disable_forward_pre_hook()` then walks the changed module tree and fails its
`assert len(self.remove_forward_pre_hook_handles) == 0`.

On CPU a `CudaGraphManager` cannot be constructed (it needs a CUDA stream), so a parameterless
`torch.nn.Module` stands in for it (a real `CudaGraphManager` owns no parameters either); the
deletion and re-insertion are done by megatron-core's own `toggle_cuda_graphs` without
rebuilding managers (`reset_cuda_graphs=False` on 0.16; the only mode from 0.17 on). The
`gpu` variant uses real `CudaGraphManager`s, which megatron-core creates only while building a
model whose config says `cuda_graph_impl="local"` (transformer/module.py `GraphableMegatronModule`
-> transformer_layer.py `create_mcore_cudagraph_manager`); `toggle_cuda_graphs` merely caches,
re-sets and deletes them (transformer/utils.py `init_cuda_graph_cache`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any, Literal

import pytest
import torch

SEQ = 8
VOCAB = 64
HOOK_QUALNAME = "DistributedDataParallel._make_forward_pre_hook.<locals>.hook"
STAND_IN = (
    "uses a parameterless stand-in for CudaGraphManager, which exists because a real one needs "
    "CUDA; on a GPU the real managers are tested (test_real_toggle_cuda_graphs_gpu)"
)
# A stand-in run segfaulted on a GPU in the forced param sync (`spy`). The likely cause: the
# integration tests' `world1` group, reused by `mcore_parallel`, was gloo even on CUDA, so
# megatron-core's all-gather of CUDA buffers went through gloo. `world1` now uses NCCL there.


class StandInCudaGraphManager(torch.nn.Module):
    """CPU stand-in for `CudaGraphManager`: a submodule without parameters."""


def _tiny_gpt(device: str, cuda_graph_impl: Literal["local", "none"] = "none") -> Any:
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig

    config = TransformerConfig(
        num_layers=2,
        hidden_size=16,
        num_attention_heads=2,
        use_cpu_initialization=device == "cpu",
        params_dtype=torch.float32,
        bf16=False,
        gradient_accumulation_fusion=False,
        apply_rope_fusion=False,
        bias_dropout_fusion=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        cuda_graph_impl=cuda_graph_impl,
    )
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=VOCAB,
        max_sequence_length=SEQ,
    )
    return model.to(device)


def _transformer_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    from megatron.core.transformer.transformer_layer import TransformerLayer

    layers: list[torch.nn.Module] = [m for m in model.modules() if isinstance(m, TransformerLayer)]
    assert layers, "tiny GPTModel has no TransformerLayer"
    return layers


def _wrap_ddp(model: Any) -> Any:
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        use_distributed_optimizer=True,
    )
    ddp = DistributedDataParallel(config=model.config, ddp_config=ddp_config, module=model)
    assert ddp.use_forward_hook
    return ddp


def _toggle(model: torch.nn.Module, set_to: str) -> None:
    """megatron-core's `toggle_cuda_graphs`, re-using cached managers (no CUDA needed)."""
    from megatron.core.transformer.utils import toggle_cuda_graphs

    if "reset_cuda_graphs" in inspect.signature(toggle_cuda_graphs).parameters:
        # core 0.16.x only (its default True rebuilds the managers, which needs CUDA); the
        # parameter is gone from core_v0.17.0 on (upstream 1106df4619), so 0.19.x and the
        # 0.20 pin take the branch below and type-check against the 2-argument signature.
        toggle_cuda_graphs(model, set_to=set_to, reset_cuda_graphs=False)  # pyrefly: ignore[unexpected-keyword]
    else:
        toggle_cuda_graphs(model, set_to=set_to)


@pytest.fixture
def forget_cuda_graph_cache() -> Iterator[list[torch.nn.Module]]:
    """Drop the models the test registers from toggle_cuda_graphs' module-global cache."""
    models: list[torch.nn.Module] = []
    yield models
    from megatron.core.transformer import utils

    cache = getattr(utils, "cuda_graph_attr_cache", None)
    for model in models:
        if cache:
            cache.pop(id(model), None)


def _ddp_hooks(module: torch.nn.Module) -> list[Callable[..., Any]]:
    return [
        h
        for h in module._forward_pre_hooks.values()
        if getattr(h, "__qualname__", "") == HOOK_QUALNAME
    ]


def _forward(ddp: Any, device: str) -> torch.Tensor:
    tokens = torch.arange(SEQ, device=device).remainder(VOCAB).unsqueeze(0)
    position_ids = torch.arange(SEQ, device=device).unsqueeze(0)
    mask = torch.triu(torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool, device=device), diagonal=1)
    with torch.no_grad():
        logits = ddp(input_ids=tokens, position_ids=position_ids, attention_mask=mask)
    assert logits.shape == (1, SEQ, VOCAB)
    assert torch.isfinite(logits).all()
    return logits


def _assert_no_ddp_hooks(ddp: Any, removed: list[torch.nn.Module]) -> None:
    leftover = [m for m in [*ddp.module.modules(), *removed] if _ddp_hooks(m)]
    assert leftover == [], f"DDP forward pre-hooks left on {[type(m).__name__ for m in leftover]}"
    assert len(ddp.remove_forward_pre_hook_handles) == 0


def _spy_param_sync(ddp: Any, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    original = ddp.start_param_sync

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(ddp, "start_param_sync", spy)
    return calls


def _attach_stand_in_managers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """One stand-in `cudagraph_manager` per transformer layer, as toggle_cuda_graphs("local")."""
    managers: list[torch.nn.Module] = []
    for layer in _transformer_layers(model):
        manager = StandInCudaGraphManager()
        layer.cudagraph_manager = manager
        managers.append(manager)
    return managers


@pytest.mark.cpu_only(reason=STAND_IN)
def test_disable_after_cudagraph_managers_removed(
    mcore_device: str,
    forget_cuda_graph_cache: list[torch.nn.Module],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hooks enabled while cudagraph_manager submodules exist; managers deleted; disable."""
    model = _tiny_gpt(mcore_device)
    forget_cuda_graph_cache.append(model)
    managers = _attach_stand_in_managers(model)
    ddp = _wrap_ddp(model)  # enables the forward pre-hooks, managers included
    assert all(_ddp_hooks(m) for m in managers)

    _toggle(model, "none")  # deletes every cudagraph_manager attribute
    assert not any(hasattr(layer, "cudagraph_manager") for layer in _transformer_layers(model))
    syncs = _spy_param_sync(ddp, monkeypatch)

    ddp.disable_forward_pre_hook()

    _assert_no_ddp_hooks(ddp, managers)
    assert syncs == [{"force_sync": True}], "the forced param sync must still happen"
    _forward(ddp, mcore_device)
    ddp.enable_forward_pre_hook()
    assert len(ddp.remove_forward_pre_hook_handles) == len(list(model.modules()))
    _forward(ddp, mcore_device)


@pytest.mark.cpu_only(reason=STAND_IN)
def test_grpo_order_toggle_then_weight_swap(
    mcore_device: str, forget_cuda_graph_cache: list[torch.nn.Module]
) -> None:
    """Generation toggles CUDA graphs on and off, then the reference swap disables hooks."""
    model = _tiny_gpt(mcore_device)
    forget_cuda_graph_cache.append(model)
    managers = _attach_stand_in_managers(model)
    _toggle(model, "none")  # training runs without CUDA graphs
    ddp = _wrap_ddp(model)
    policy_logits = _forward(ddp, mcore_device)

    # Generation: hooks off (param sync), CUDA graphs on, hooks back on (now on the managers).
    ddp.disable_forward_pre_hook(param_sync=True)
    _toggle(model, "local")
    assert all(hasattr(layer, "cudagraph_manager") for layer in _transformer_layers(model))
    ddp.enable_forward_pre_hook()
    # End of generation: CUDA graphs off, the managers are deleted.
    _toggle(model, "none")

    # Reference logprobs: the weight swap disables the hooks first.
    ddp.disable_forward_pre_hook(param_sync=True)
    _assert_no_ddp_hooks(ddp, managers)
    saved = {k: v.detach().clone() for k, v in model.state_dict().items() if v is not None}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    reference_logits = _forward(ddp, mcore_device)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(saved[name])
    ddp.enable_forward_pre_hook()

    assert not torch.equal(reference_logits, policy_logits)
    torch.testing.assert_close(_forward(ddp, mcore_device), policy_logits)


@pytest.fixture
def cudagraph_ready(mcore_device: str) -> Iterator[None]:
    """What a local `CudaGraphManager` needs, undone afterwards for the rest of the session.

    Its constructor asserts a cudagraph-safe RNG tracker (transformer/cuda_graphs.py
    `CudaGraphManager.__init__`: "RNG tracker does not support cudagraphs!"); the inference
    tracker is one. The first manager also moves the process onto a side stream and patches
    `save_for_backward`; `delete_cuda_graphs` and the saved stream undo that.
    """
    from megatron.core import tensor_parallel
    from megatron.core.transformer.cuda_graphs import delete_cuda_graphs

    stream = torch.cuda.current_stream()
    tensor_parallel.model_parallel_cuda_manual_seed(
        1234, inference_rng_tracker=True, force_reset_rng=True
    )
    try:
        yield
    finally:
        delete_cuda_graphs()
        torch.cuda.set_stream(stream)
        # The tracker the `mcore_parallel` fixture set up (mcore_grpo.worker.cpu on CUDA).
        tensor_parallel.model_parallel_cuda_manual_seed(1234, force_reset_rng=True)


@pytest.mark.gpu
def test_real_toggle_cuda_graphs_gpu(
    mcore_device: str, cudagraph_ready: None, forget_cuda_graph_cache: list[torch.nn.Module]
) -> None:
    """GPU: NeMo-RL's order with the real CudaGraphManagers of a `cuda_graph_impl="local"` model:
    graphs off for training, on for generation (hooks re-enabled on the managers), off again,
    then the hooks disabled."""
    from megatron.core.transformer.cuda_graphs import CudaGraphManager
    from megatron.core.transformer.utils import toggle_cuda_graphs

    model = _tiny_gpt(mcore_device, cuda_graph_impl="local")
    forget_cuda_graph_cache.append(model)
    layers = _transformer_layers(model)
    managers: list[torch.nn.Module] = []
    for layer in layers:
        manager = layer.cudagraph_manager
        assert isinstance(manager, CudaGraphManager)
        managers.append(manager)
    toggle_cuda_graphs(model, set_to="none")  # caches the managers, then deletes them
    assert not any(hasattr(layer, "cudagraph_manager") for layer in layers)
    ddp = _wrap_ddp(model)

    ddp.disable_forward_pre_hook(param_sync=True)
    toggle_cuda_graphs(model, set_to="local")
    assert all(layer.cudagraph_manager is m for layer, m in zip(layers, managers, strict=True))
    ddp.enable_forward_pre_hook()
    assert all(_ddp_hooks(m) for m in managers)
    toggle_cuda_graphs(model, set_to="none")

    ddp.disable_forward_pre_hook(param_sync=True)

    _assert_no_ddp_hooks(ddp, managers)
    _forward(ddp, mcore_device)
