"""Reference-policy logprobs: reference weights kept off-device, swapped in for one forward.

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


def _host_copy(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Detached host copies of every parameter and buffer, by name."""
    tensors: dict[str, torch.Tensor] = {
        **dict(module.named_parameters()),
        **dict(module.named_buffers()),
    }
    return {k: v.detach().to(HOST, copy=True) for k, v in tensors.items()}


def _load_in_place(module: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Copy `weights` into the live tensors (they are views into DDP's param buffer)."""
    live: dict[str, torch.Tensor] = {
        **dict(module.named_parameters()),
        **dict(module.named_buffers()),
    }
    missing = sorted(set(live) - set(weights))
    if missing:
        raise KeyError(f"reference weights lack {missing[:3]}... ({len(missing)} tensors)")
    with torch.no_grad():
        for name, tensor in live.items():
            tensor.copy_(weights[name])


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
        self._weights = {k: v.detach().to(HOST, copy=True) for k, v in weights.items()}

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
        policy_weights = _host_copy(policy.gpt)
        _load_in_place(policy.gpt, self._weights)
        try:
            yield
        finally:
            _load_in_place(policy.gpt, policy_weights)
            if had_hooks:
                policy.ddp.enable_forward_pre_hook()
