"""Count gradient bytes that go through torch.distributed reductions.

Wraps `all_reduce` / `reduce_scatter_tensor` / `_reduce_scatter_base` on torch.distributed and
megatron's module-level `dist_reduce_scatter_func` alias (bound at import in
megatron/core/distributed/param_and_grad_buffer.py), and attributes a call to the gradient
when its input shares storage with a DDP grad buffer. `ratio` = gradient bytes reduced /
grad-buffer bytes: 1.0 is one reduction per optimizer step; 2.0 means gradients were reduced
twice (the `start_grad_sync` + `finish_grad_sync` with `overlap_grad_reduce=False` pitfall).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

_NAMES = ("all_reduce", "reduce_scatter_tensor", "_reduce_scatter_base")


@dataclass
class CommVolume:
    """Bytes seen during one `count_gradient_reductions` block."""

    grad_buffer_bytes: int
    grad_bytes_reduced: int = 0
    other_bytes_reduced: int = 0
    calls: list[tuple[str, int, bool]] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """Gradient bytes reduced per byte of gradient buffer."""
        return self.grad_bytes_reduced / self.grad_buffer_bytes


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


@contextlib.contextmanager
def count_gradient_reductions(ddp: Any) -> Iterator[CommVolume]:
    """Count reductions while the block runs; `ddp` supplies the grad buffers."""
    from megatron.core.distributed import param_and_grad_buffer as pgb

    buffers = list(ddp.buffers) + list(getattr(ddp, "expert_parallel_buffers", []))
    storages = {b.grad_data.untyped_storage().data_ptr() for b in buffers}
    volume = CommVolume(grad_buffer_bytes=sum(_nbytes(b.grad_data) for b in buffers))

    def wrap(name: str, fn: Callable[..., Any], tensor_arg: int) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            tensor = args[tensor_arg] if len(args) > tensor_arg else next(iter(kwargs.values()))
            is_grad = tensor.untyped_storage().data_ptr() in storages
            volume.calls.append((name, _nbytes(tensor), is_grad))
            if is_grad:
                volume.grad_bytes_reduced += _nbytes(tensor)
            else:
                volume.other_bytes_reduced += _nbytes(tensor)
            return fn(*args, **kwargs)

        return counted

    originals = {n: getattr(dist, n) for n in _NAMES if hasattr(dist, n)}
    # all_reduce(tensor, ...); reduce_scatter_tensor(output, input, ...): count the input.
    wrapped = {n: wrap(n, f, 0 if n == "all_reduce" else 1) for n, f in originals.items()}
    alias = pgb.dist_reduce_scatter_func
    alias_wrapped = wrap("dist_reduce_scatter_func", alias, 1)
    try:
        for n, f in wrapped.items():
            setattr(dist, n, f)
        pgb.dist_reduce_scatter_func = alias_wrapped
        yield volume
    finally:
        for n, f in originals.items():
            setattr(dist, n, f)
        pgb.dist_reduce_scatter_func = alias
