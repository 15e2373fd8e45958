"""Move parameters, gradient buffers and optimizer state off the device and back.

Works on storages, not tensors: DDP's params and `main_grad`s and the distributed optimizer's
shards are views into a few flat buffers, so each distinct storage is copied to the host once
and its device allocation released (`resize_(0)`); views stay valid and see the data again
after `onload`. NCCL process groups are destroyed and rebuilt by
`mcore_grpo.worker.memory.nccl_offload` (the one implementation shared with the NeMo-RL patch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from mcore_grpo.worker.model import PolicyModel


@dataclass
class OffloadReport:
    """Bytes moved in one direction, by category."""

    params: int = 0
    grads: int = 0
    optimizer: int = 0

    @property
    def total(self) -> int:
        """All bytes moved."""
        return self.params + self.grads + self.optimizer


@dataclass
class _Saved:
    storage: torch.UntypedStorage
    host: torch.Tensor  # uint8 host copy of the whole storage
    category: str


def _optimizer_state_tensors(optimizer: Any) -> list[torch.Tensor]:
    """Every tensor in the torch optimizers' state under a (chained) megatron optimizer."""
    chained = getattr(optimizer, "chained_optimizers", [optimizer])
    out: list[torch.Tensor] = []
    for opt in chained:
        inner = getattr(opt, "optimizer", None)
        if inner is None:
            continue
        for state in inner.state.values():
            out.extend(v for v in state.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
        for group in inner.param_groups:
            out.extend(p for p in group["params"] if isinstance(p, torch.Tensor))
    return out


@dataclass
class Offloader:
    """Tracks what is offloaded; `offload` then `onload` restores every byte."""

    policy: PolicyModel
    _saved: list[_Saved] = field(default_factory=list)

    @property
    def is_offloaded(self) -> bool:
        """Whether device storages are currently released."""
        return bool(self._saved)

    def _buffers(self) -> list[Any]:
        ddp = self.policy.ddp
        return list(ddp.buffers) + list(getattr(ddp, "expert_parallel_buffers", []))

    def _params(self) -> list[torch.Tensor]:
        """The model's parameters and DDP's flat param buffers they are views of."""
        params = list(self.policy.ddp.module.parameters())
        return params + [
            b.param_data for b in self._buffers() if getattr(b, "param_data", None) is not None
        ]

    def _categorised(self, grads: bool, optimizer: bool) -> list[tuple[str, torch.Tensor]]:
        items: list[tuple[str, torch.Tensor]] = [("params", p) for p in self._params()]
        if grads:
            items.extend(("grads", b.grad_data) for b in self._buffers())
        if optimizer:
            items.extend(("optimizer", t) for t in _optimizer_state_tensors(self.policy.optimizer))
        return items

    def offload(
        self, params: bool = True, grads: bool = True, optimizer: bool = True
    ) -> OffloadReport:
        """Copy each distinct storage of the chosen kinds to the host and free it on the
        device. With `params=False` a storage the parameters live in stays, also where the
        optimizer holds views of it (fp32 main params of the distributed optimizer)."""
        if self._saved:
            raise RuntimeError("Offloader.offload: already offloaded; call onload() first.")
        report = OffloadReport()
        # Storages not to copy: those already copied, and with params=False the parameters'.
        seen = set() if params else {p.untyped_storage().data_ptr() for p in self._params()}
        for category, tensor in self._categorised(grads, optimizer):
            storage = tensor.untyped_storage()
            ptr = storage.data_ptr()
            if ptr == 0 or ptr in seen:
                continue
            seen.add(ptr)
            host = torch.empty(storage.nbytes(), dtype=torch.uint8, device="cpu")
            host.copy_(torch.tensor([], dtype=torch.uint8, device=storage.device).set_(storage))
            self._saved.append(_Saved(storage, host, category))
            setattr(report, category, getattr(report, category) + storage.nbytes())
        for saved in self._saved:
            saved.storage.resize_(0)
        return report

    def onload(self) -> OffloadReport:
        """Re-allocate each released storage and copy its bytes back."""
        report = OffloadReport()
        for saved in self._saved:
            saved.storage.resize_(saved.host.numel())
            torch.tensor([], dtype=torch.uint8, device=saved.storage.device).set_(
                saved.storage
            ).copy_(saved.host)
            setattr(report, saved.category, getattr(report, saved.category) + saved.host.numel())
        self._saved.clear()
        return report


def destroy_process_groups(mode: str = "manual", device: str = "cuda") -> Any:
    """Destroy megatron's process groups via the shared NeMo-RL module; returns its result.

    On the CPU device every megatron group is gloo and gloo stands in for NCCL, so all
    discovered groups are destroyed (the module's default predicate skips gloo groups).
    """
    module = _nccl_offload()
    if device == "cpu":
        return module.destroy_megatron_nccl_groups(mode=mode, is_nccl_like=lambda name, group: True)
    return module.destroy_megatron_nccl_groups(mode=mode)


def reload_process_groups(result: Any) -> Any:
    """Rebuild megatron's process groups from `destroy_process_groups`'s result; every rank
    checks its rebuilt groups have the members the destroyed ones had."""
    return _nccl_offload().reload_megatron_nccl_groups(
        result.snapshot, expected_layout=result.rank_layout
    )


def _nccl_offload() -> Any:
    try:
        from mcore_grpo.worker.memory import nccl_offload
    except ImportError as err:
        raise ImportError(
            "mcore_grpo.worker.memory.nccl_offload is missing: it is the NCCL-offload "
            "implementation shared with patches/NeMo-RL/megatron-nccl-offload.patch "
            "(NeMo-RL engineer, issue 6)."
        ) from err
    return nccl_offload
