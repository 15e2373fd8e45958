# The same code as nemo_rl/models/megatron/nccl_offload.py added by
# patches/NeMo-RL/megatron-nccl-offload.patch: ONE implementation, kept here so the
# integration worker can use it without NeMo-RL. Edit both together;
# tests/patches/nemo_rl/test_nccl_offload_copy_in_sync.py fails when they drift.
"""Free and rebuild Megatron's NCCL process groups to time-share a GPU.

Each NCCL communicator holds device memory outside the PyTorch caching allocator
(hundreds of MiB per group on large jobs), and Megatron keeps one communicator per
parallel group for the life of the process. When another engine takes over the GPU
(colocated generation, a second model), that memory can be returned by destroying
the groups and rebuilding them from the parallel configuration afterwards:

    result = destroy_megatron_nccl_groups()
    ...  # the GPU is used by someone else
    reload_megatron_nccl_groups(result.snapshot)

Only ``megatron.core.parallel_state`` is managed. Objects that cached a group handle
(DDP buffers, ``ProcessGroupCollection`` instances) still hold the destroyed groups
and must be rebuilt or re-pointed by the caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import torch
import torch.distributed as dist
from megatron.core import parallel_state

# Decides which of the process groups found in ``parallel_state`` are destroyed
# by the manual mode: called with the module attribute name and the group.
GroupPredicate = Callable[[str, dist.ProcessGroup], bool]

# The parallel sizes a snapshot records, with the parallel_state getter for each.
_SNAPSHOT_GETTERS: dict[str, str] = {
    "tensor_model_parallel_size": "get_tensor_model_parallel_world_size",
    "pipeline_model_parallel_size": "get_pipeline_model_parallel_world_size",
    "context_parallel_size": "get_context_parallel_world_size",
    "expert_model_parallel_size": "get_expert_model_parallel_world_size",
    "expert_tensor_parallel_size": "get_expert_tensor_parallel_world_size",
}
_VIRTUAL_PP_GETTER = "get_virtual_pipeline_model_parallel_world_size"
_VIRTUAL_PP_KEY = "virtual_pipeline_model_parallel_size"


class NcclOffloadError(RuntimeError):
    """Destroying or rebuilding Megatron's process groups failed."""


@dataclasses.dataclass(frozen=True)
class NcclOffloadResult:
    """What ``destroy_megatron_nccl_groups`` did.

    Attributes:
        snapshot: keyword arguments for ``initialize_model_parallel`` that rebuild
            the destroyed configuration; empty when nothing was initialised.
        groups_destroyed: ``parallel_state`` attribute names (with ``[i]``/``[key]``
            for groups held in lists or dicts) of the groups destroyed explicitly,
            in destruction order; empty in "official" mode.
        bytes_freed: device memory returned to the driver, measured with
            ``torch.cuda.mem_get_info``; None without CUDA.
    """

    snapshot: dict[str, int]
    groups_destroyed: list[str]
    bytes_freed: int | None


def is_nccl_like_group(name: str, group: dist.ProcessGroup) -> bool:
    """Default predicate: every group except Gloo ones.

    Gloo groups are Megatron's CPU helper groups (``*_GLOO``); its own
    ``destroy_model_parallel`` destroys those. Any other backend counts, so
    nothing here depends on the device backend being called "nccl".
    """
    return dist.get_backend(group) != "gloo"


def _iter_groups(value: Any, name: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _iter_groups(item, f"{name}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _iter_groups(item, f"{name}[{key!r}]")
    elif isinstance(value, dist.ProcessGroup):
        yield name, value


def find_megatron_process_groups(
    is_nccl_like: GroupPredicate = is_nccl_like_group,
) -> list[tuple[str, dist.ProcessGroup]]:
    """Process groups held by ``parallel_state`` that ``is_nccl_like`` selects.

    Found by introspection of the module's globals (so groups added by newer
    Megatron versions are included), deduplicated (several globals may alias one
    group; the first name in sorted order is reported), without the world group.
    """
    found: list[tuple[str, dist.ProcessGroup]] = []
    seen: set[int] = set()
    for attr in sorted(vars(parallel_state)):
        for name, group in _iter_groups(getattr(parallel_state, attr), attr):
            if id(group) in seen or group is dist.GroupMember.WORLD:
                continue
            seen.add(id(group))
            if is_nccl_like(name, group):
                found.append((name, group))
    return found


def _parallel_config_snapshot() -> dict[str, int]:
    snapshot: dict[str, int] = {}
    for key, getter in _SNAPSHOT_GETTERS.items():
        snapshot[key] = int(getattr(parallel_state, getter)())
    virtual_pp = getattr(parallel_state, _VIRTUAL_PP_GETTER)()
    if virtual_pp is not None:
        snapshot[_VIRTUAL_PP_KEY] = int(virtual_pp)
    return snapshot


def _device_free_bytes() -> int | None:
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    torch.cuda.synchronize()
    free_bytes, _total = torch.cuda.mem_get_info()
    return int(free_bytes)


def destroy_megatron_nccl_groups(
    mode: Literal["manual", "official"] = "manual",
    *,
    is_nccl_like: GroupPredicate = is_nccl_like_group,
) -> NcclOffloadResult:
    """Destroy Megatron's process groups and return what rebuilds them.

    Args:
        mode: "manual" destroys every group ``is_nccl_like`` selects with
            ``torch.distributed.destroy_process_group`` (freeing the NCCL
            communicators), then lets ``destroy_model_parallel()`` reset Megatron's
            remaining globals; "official" only calls ``destroy_model_parallel()``.
        is_nccl_like: which discovered groups the manual mode destroys; the
            default skips Gloo helper groups.

    Returns:
        The parallel-config snapshot for ``reload_megatron_nccl_groups`` and stats.
        When nothing is initialised this is a no-op with an empty snapshot.

    Raises:
        NcclOffloadError: a group could not be destroyed (the message names it) or
            the residual reset failed; nothing is swallowed.
        ValueError: unknown mode.
    """
    if mode not in ("manual", "official"):
        raise ValueError(f"mode must be 'manual' or 'official', got {mode!r}")
    if not parallel_state.model_parallel_is_initialized():
        return NcclOffloadResult(snapshot={}, groups_destroyed=[], bytes_freed=None)

    snapshot = _parallel_config_snapshot()
    free_before = _device_free_bytes()
    destroyed: list[str] = []
    if mode == "manual":
        for name, group in find_megatron_process_groups(is_nccl_like):
            try:
                dist.destroy_process_group(group)
            except Exception as exc:
                raise NcclOffloadError(
                    f"destroying Megatron process group parallel_state.{name} failed "
                    f"after {len(destroyed)} group(s) were destroyed: {exc}"
                ) from exc
            destroyed.append(name)
    try:
        parallel_state.destroy_model_parallel()
    except Exception as exc:
        raise NcclOffloadError(
            "resetting Megatron's parallel state with destroy_model_parallel() "
            f"failed ({mode} mode): {exc}"
        ) from exc
    free_after = _device_free_bytes()
    freed = None
    if free_before is not None and free_after is not None:
        freed = free_after - free_before
    return NcclOffloadResult(
        snapshot=snapshot,
        groups_destroyed=destroyed,
        bytes_freed=freed,
    )


def reload_megatron_nccl_groups(snapshot: Mapping[str, int]) -> None:
    """Rebuild Megatron's process groups from a destroy snapshot, then barrier.

    A no-op when Megatron is already initialised with the same configuration.

    Args:
        snapshot: ``NcclOffloadResult.snapshot`` from ``destroy_megatron_nccl_groups``.

    Raises:
        ValueError: the snapshot is empty (the destroy ran while nothing was
            initialised, so there is no configuration to rebuild), or its keys
            are not those of a destroy snapshot.
        NcclOffloadError: Megatron is initialised with a different configuration.
    """
    if not snapshot:
        raise ValueError(
            "reload_megatron_nccl_groups: empty snapshot. The matching "
            "destroy_megatron_nccl_groups() ran while Megatron's model parallel "
            "state was not initialised, so there is no configuration to rebuild; "
            "call parallel_state.initialize_model_parallel(...) instead."
        )
    missing = sorted(set(_SNAPSHOT_GETTERS) - set(snapshot))
    unknown = sorted(set(snapshot) - set(_SNAPSHOT_GETTERS) - {_VIRTUAL_PP_KEY})
    if missing or unknown:
        raise ValueError(
            f"reload_megatron_nccl_groups: snapshot lacks {missing} and has unknown "
            f"keys {unknown}; a destroy snapshot records {sorted(_SNAPSHOT_GETTERS)} "
            f"and optionally {_VIRTUAL_PP_KEY!r}: pass NcclOffloadResult.snapshot "
            "unchanged."
        )
    if parallel_state.model_parallel_is_initialized():
        current = _parallel_config_snapshot()
        if current == dict(snapshot):
            return
        raise NcclOffloadError(
            "reload_megatron_nccl_groups: Megatron is already initialised with "
            f"{current}, not the snapshot {dict(snapshot)}; destroy it first."
        )
    # Keyword by keyword (not **snapshot): each value reaches the parameter of its type.
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=snapshot["tensor_model_parallel_size"],
        pipeline_model_parallel_size=snapshot["pipeline_model_parallel_size"],
        virtual_pipeline_model_parallel_size=snapshot.get(_VIRTUAL_PP_KEY),
        context_parallel_size=snapshot["context_parallel_size"],
        expert_model_parallel_size=snapshot["expert_model_parallel_size"],
        expert_tensor_parallel_size=snapshot["expert_tensor_parallel_size"],
    )
    dist.barrier()
