"""Reference-policy logprobs: reference weights kept off-device, swapped in for one forward.

On CUDA the host copy is pinned and loaded with non-blocking copies, and the policy weights set
aside during the swap stay on the GPU when it has room for them (a device-to-device copy):
with pageable host copies both ways a swap of Qwen2.5-1.5B's 3.1 GB of bf16 weights took
~8 s on an H200, as long as the rest of a gpu-smoke GRPO step together.

The swap disables the DDP forward pre-hooks first: that forces the pending param all-gather
(overlap_param_gather), so the policy weights saved and restored are the current ones, and no
hook fires a gather into the middle of the reference weights. After a generation phase that
added and then removed `cudagraph_manager` submodules, unpatched megatron-core asserts in
`disable_forward_pre_hook` (the DDP forward-pre-hook patch fixes it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import torch

from mcore_grpo.worker.model import PolicyModel

HOST = torch.device("cpu")


# Headroom left free on the GPU when the policy weights are set aside there during a swap.
DEVICE_BACKUP_MARGIN_BYTES = 1 << 30


def _tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


def _to_host(tensor: torch.Tensor) -> torch.Tensor:
    """A detached host copy; pinned where CUDA is available, so loading it back is a
    non-blocking DMA rather than a staged pageable copy."""
    host = tensor.detach().to(HOST, copy=True)
    return host.pin_memory() if torch.cuda.is_available() else host


def _host_copy(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Detached host copies of every parameter and buffer, by name."""
    return {k: _to_host(v) for k, v in _tensors(module).items()}


def _set_aside(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Copies of the live weights to restore after a swap: beside them on the GPU when it has
    room (plus a margin), else on the host."""
    live = _tensors(module)
    first = next(iter(live.values()), None)
    if first is not None and first.device.type == "cuda":
        need = sum(t.numel() * t.element_size() for t in live.values())
        free, _ = torch.cuda.mem_get_info(first.device)
        if free >= need + DEVICE_BACKUP_MARGIN_BYTES:
            return {k: v.detach().clone() for k, v in live.items()}
    return {k: v.detach().to(HOST, copy=True) for k, v in live.items()}


def _load_in_place(module: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Copy `weights` into the live tensors (they are views into DDP's param buffer).

    Copies are issued non-blocking: from pinned host memory or another GPU tensor they are
    ordered on the current stream before any kernel that reads the weights; from pageable
    memory torch copies synchronously anyway."""
    live = _tensors(module)
    missing = sorted(set(live) - set(weights))
    if missing:
        raise KeyError(f"reference weights lack {missing[:3]}... ({len(missing)} tensors)")
    with torch.no_grad():
        for name, tensor in live.items():
            tensor.copy_(weights[name], non_blocking=True)


def _describe(tensor: torch.Tensor | None) -> str:
    return "missing" if tensor is None else f"{tuple(tensor.shape)} {tensor.dtype}"


def hooks_enabled(policy: PolicyModel) -> bool:
    """Whether DDP's forward pre-hooks (overlap_param_gather) are currently registered."""
    return bool(getattr(policy.ddp, "remove_forward_pre_hook_handles", None))


class ReferencePolicy:
    """Holds the reference weights on the host; `swapped_in` runs a block with them loaded."""

    def __init__(self, policy: PolicyModel) -> None:
        self._weights = _host_copy(policy.gpt)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The reference weights by parameter/buffer name, host tensors (for checkpoints).

        Like `nn.Module.state_dict`, the tensors are the held ones: save or clone them,
        do not modify them in place.
        """
        return dict(self._weights)

    def load_state_dict(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Replace the reference weights (e.g. from a checkpoint), copied to the host.

        Raises ValueError naming the tensors whose name, shape or dtype differs from the
        held ones (the reference must fit the policy it is swapped into).
        """
        diffs = [
            f"{name}: given {_describe(weights.get(name))}, "
            f"held {_describe(self._weights.get(name))}"
            for name in sorted(set(weights) | set(self._weights))
            if name not in weights
            or name not in self._weights
            or weights[name].shape != self._weights[name].shape
            or weights[name].dtype != self._weights[name].dtype
        ]
        if diffs:
            raise ValueError(
                f"ReferencePolicy.load_state_dict: {len(diffs)} tensor(s) do not fit the "
                "policy model; pass weights saved from ReferencePolicy.state_dict() of the same "
                "model config:\n  " + "\n  ".join(diffs[:8])
            )
        self._weights = {k: _to_host(v) for k, v in weights.items()}

    @property
    def num_bytes(self) -> int:
        """Host bytes the reference weights occupy."""
        return sum(t.numel() * t.element_size() for t in self._weights.values())

    @contextlib.contextmanager
    def swapped_in(self, policy: PolicyModel) -> Iterator[None]:
        """Disable hooks (param sync), load reference, yield, restore policy, re-enable hooks."""
        had_hooks = hooks_enabled(policy)
        if had_hooks:
            policy.ddp.disable_forward_pre_hook(param_sync=True)
        policy_weights = _set_aside(policy.gpt)
        _load_in_place(policy.gpt, self._weights)
        try:
            yield
        finally:
            _load_in_place(policy.gpt, policy_weights)
            if had_hooks:
                policy.ddp.enable_forward_pre_hook()
