"""CPU device redirects so megatron-core's CUDA-only code paths run on a CPU test machine.

megatron-core hard-codes CUDA in a handful of places that a CPU smoke/test run still reaches
(buffer allocation, the distributed optimizer, grad-sync stream waits). `cpu_device()` redirects
exactly those, for the duration of a `with` block, and only when the configured device is
``"cpu"`` and CUDA is absent. With CUDA present it refuses (a GPU run must never be silently
redirected); with device ``"cuda"`` it is a no-op.

Each redirect names the upstream line (core_v0.16.1 / core_v0.19.0) that needs it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_LOCK = threading.Lock()
_DEPTH = 0
_SAVED: dict[str, Callable[..., Any]] = {}


class NoOpStream:
    """Stands in for `torch.cuda.Stream`: CPU kernels are synchronous, so every wait is a no-op.

    Needed by core_v0.19.0 megatron/core/distributed/param_and_grad_buffer.py:632
    (`current_stream = torch.cuda.current_stream()` then `current_stream.wait_event(...)` in
    `_ParamAndGradBucketGroup.start_grad_sync`) and :691/:814 (`wait_stream`).
    """

    device = torch.device("cpu")

    def wait_stream(self, stream: object) -> None:
        """No-op: there is only one (synchronous) CPU stream."""

    def wait_event(self, event: object) -> None:
        """No-op: CPU work is complete when the call returns."""

    def record_event(self, event: object | None = None) -> None:
        """No-op; returns nothing because no caller on the CPU path reads it."""

    def synchronize(self) -> None:
        """No-op."""

    def query(self) -> bool:
        """Always done."""
        return True


_NO_OP_STREAM = NoOpStream()


def _is_cuda_device(value: object) -> bool:
    """True when `value` names a CUDA device (str, torch.device or a bare CUDA ordinal)."""
    if isinstance(value, torch.device):
        return value.type == "cuda"
    if isinstance(value, str):
        return value.split(":", 1)[0] == "cuda"
    # A bare int as a device argument means cuda:<int> in torch.
    return isinstance(value, int) and not isinstance(value, bool)


_CUDA_TYPE_NAMES = {
    "torch.FloatTensor": "torch.cuda.FloatTensor",
    "torch.HalfTensor": "torch.cuda.HalfTensor",
    "torch.BFloat16Tensor": "torch.cuda.BFloat16Tensor",
    "torch.DoubleTensor": "torch.cuda.DoubleTensor",
    "torch.IntTensor": "torch.cuda.IntTensor",
    "torch.LongTensor": "torch.cuda.LongTensor",
    "torch.ByteTensor": "torch.cuda.ByteTensor",
    "torch.BoolTensor": "torch.cuda.BoolTensor",
}


class CudaToCpuMode(TorchFunctionMode):
    """Maps CUDA device arguments to the CPU and reports CPU tensors with CUDA type names.

    Needed by:
    - core_v0.16.1 megatron/core/optimizer/optimizer.py:473/481/485 and core_v0.19.0
      optimizer.py:690/698/702 (`torch.tensor(..., device='cuda')` for found_inf/_scale_one),
      grad_scaler.py (`device='cuda'`), clip_grads.py:96/108 (0.19) and
      param_and_grad_buffer.py:768 (0.16.1; `torch.zeros([1], device="cuda")`);
    - core_v0.16.1 megatron/core/optimizer/distrib_optimizer.py:361/420 and core_v0.19.0
      distrib_optimizer.py:401/466 (`model_param.type() == 'torch.cuda.FloatTensor'` etc.),
      and optimizer.py:671/690 (0.16.1) for the same checks in Float16OptimizerWithFloat16Params.
    """

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        if "device" in kwargs and _is_cuda_device(kwargs["device"]):
            kwargs["device"] = "cpu"
            # pin_memory needs a CUDA driver; it is meaningless for CPU-resident tensors.
            kwargs.pop("pin_memory", None)
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            name = func(*args)
            return _CUDA_TYPE_NAMES.get(name, name)
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.to:
            args = tuple("cpu" if i > 0 and _is_cuda_device(a) else a for i, a in enumerate(args))
        return func(*args, **kwargs)


def _current_device() -> torch.device:
    """Replacement for `torch.cuda.current_device`: the CPU.

    Needed by core_v0.16.1 megatron/core/transformer/attention.py:430 (GlobalMemoryBuffer via
    `device=torch.cuda.current_device()`), megatron/core/utils.py:631 (GlobalMemoryBuffer),
    param_and_grad_buffer.py:783/800/806 (0.16.1) and :1162/1180/1186 (0.19.0) (DDP grad and
    param buffers), distrib_optimizer.py:791 (0.16.1).
    """
    return torch.device("cpu")


def _current_stream(device: object = None) -> NoOpStream:
    """Replacement for `torch.cuda.current_stream` / `default_stream` (see `NoOpStream`)."""
    return _NO_OP_STREAM


def _no_op(*args: object, **kwargs: object) -> None:
    """Replacement for `torch.cuda.synchronize` / `empty_cache`.

    Needed by core_v0.16.1 distributed_data_parallel.py:588/594/611 and core_v0.19.0
    :649/655/672 (`offload_grad_buffers` / `restore_grad_buffers` synchronise around frees).
    """


_PATCHES: dict[str, Callable[..., Any]] = {
    "current_device": _current_device,
    "current_stream": _current_stream,
    # core_v0.16.1 param_and_grad_buffer.py:422/529 wait on `torch.cuda.default_stream()`.
    "default_stream": _current_stream,
    "synchronize": _no_op,
    "empty_cache": _no_op,
}


def redirect_needed(device: str) -> bool:
    """Whether the CPU redirects apply: device "cpu" requested and no CUDA present.

    Raises when CPU is requested on a CUDA machine, because megatron-core would still put
    tensors on the GPU through code paths the redirects do not cover.
    """
    if device == "cuda":
        return False
    if device != "cpu":
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if torch.cuda.is_available():
        raise RuntimeError(
            "mcore_grpo.worker.cpu: device='cpu' was configured but CUDA is available; the CPU "
            "redirects are for CUDA-less test machines only. Configure device='cuda'."
        )
    return True


def _install() -> None:
    global _DEPTH
    with _LOCK:
        if _DEPTH == 0:
            for name, replacement in _PATCHES.items():
                _SAVED[name] = getattr(torch.cuda, name)
                setattr(torch.cuda, name, replacement)
        _DEPTH += 1


def _uninstall() -> None:
    global _DEPTH
    with _LOCK:
        _DEPTH -= 1
        if _DEPTH == 0:
            for name, original in _SAVED.items():
                setattr(torch.cuda, name, original)
            _SAVED.clear()


@contextlib.contextmanager
def cpu_device(device: str = "cpu", tensor_redirects: bool = True) -> Iterator[bool]:
    """Activate the CPU redirects for the block when `device` is "cpu" and CUDA is absent.

    Yields whether the redirects are active. Re-entrant (nested blocks share one install);
    the TorchFunctionMode is scoped to the block and to the calling thread.

    `tensor_redirects=False` keeps the `torch.cuda` function replacements but not
    `CudaToCpuMode`: for code that never names the CUDA device itself (sampling), since the
    mode runs Python on every torch call (about 9 % of a SmolLM2 decode step on 2 cores).
    """
    if not redirect_needed(device):
        yield False
        return
    _install()
    try:
        with CudaToCpuMode() if tensor_redirects else contextlib.nullcontext():
            yield True
    finally:
        _uninstall()


def redirects_active() -> bool:
    """True while any `cpu_device()` block has the `torch.cuda` functions replaced."""
    return _DEPTH > 0


def model_parallel_seed(seed: int, device: str = "cpu") -> None:
    """Seed megatron-core's RNG trackers for `device`.

    `tensor_parallel.model_parallel_cuda_manual_seed` with the default tracker snapshots CUDA
    RNG states (core_v0.16.1 megatron/core/tensor_parallel/random.py:_get_cuda_rng_state), which
    fails without CUDA; `inference_rng_tracker=True` selects the tracker that keeps no CUDA
    state (random.py `initialize_rng_tracker`).

    The CPU generator is seeded on every device, as megatron-core's own `_set_random_seed`
    does (megatron/training/initialize.py): `model_parallel_cuda_manual_seed` seeds only CUDA,
    yet some weights are allocated and initialised on the CPU even on a GPU: the MoE router's
    (megatron/core/transformer/moe/router.py `Router.__init__`/`reset_parameters`) and the
    learned position embeddings (models/common/embeddings/language_model_embedding.py, a plain
    `torch.nn.Embedding`). Without this, two workers of one seed (or two DP ranks) started from
    different weights on CUDA; seen on an H200, where it failed four tests.
    """
    from megatron.core import tensor_parallel

    torch.manual_seed(seed)
    if device == "cpu":
        tensor_parallel.model_parallel_cuda_manual_seed(seed, inference_rng_tracker=True)
    else:
        tensor_parallel.model_parallel_cuda_manual_seed(seed)
