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
    reload_megatron_nccl_groups(result.snapshot, expected_layout=result.rank_layout)

The snapshot records the parallel sizes. Options of the original
``initialize_model_parallel`` call that the sizes do not capture (``order``,
``distributed_timeout_minutes``, ``nccl_communicator_config_path``, ...) are passed
to the reload as keyword arguments; with ``expected_layout`` a reload whose groups
come out different from the destroyed ones raises instead of training on them.

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
# The groups a rank layout records the members of, with their parallel_state getter.
_LAYOUT_GETTERS: dict[str, str] = {
    "tensor_model_parallel": "get_tensor_model_parallel_group",
    "pipeline_model_parallel": "get_pipeline_model_parallel_group",
    "data_parallel": "get_data_parallel_group",
    "context_parallel": "get_context_parallel_group",
    "model_parallel": "get_model_parallel_group",
    "expert_model_parallel": "get_expert_model_parallel_group",
}


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
        rank_layout: the global ranks of this rank's tensor, pipeline, data,
            context, model and expert parallel groups before the destroy, for
            ``reload_megatron_nccl_groups(expected_layout=...)``; empty when nothing
            was initialised.
    """

    snapshot: dict[str, int]
    groups_destroyed: list[str]
    bytes_freed: int | None
    rank_layout: dict[str, list[Any]] = dataclasses.field(default_factory=dict)


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


def _group_ranks(group: Any) -> list[Any]:
    if isinstance(group, (list, tuple)):
        return [_group_ranks(item) for item in group]
    return list(dist.get_process_group_ranks(group))


def _rank_layout() -> dict[str, list[Any]]:
    """This rank's peers in each group of ``_LAYOUT_GETTERS`` that this Megatron has."""
    layout: dict[str, list[Any]] = {}
    for name, getter in _LAYOUT_GETTERS.items():
        get_group = getattr(parallel_state, getter, None)
        if get_group is not None:
            layout[name] = _group_ranks(get_group())
    return layout


def _layout_mismatch(expected: Mapping[str, list[Any]]) -> str | None:
    """None if the live groups have the expected members, else what differs."""
    current = _rank_layout()
    for name, want in expected.items():
        got = current.get(name)
        if got != want:
            return (
                f"rank {dist.get_rank()}'s {name} group is ranks {got} after the "
                f"reload, ranks {want} before the destroy"
            )
    return None


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
    layout = _rank_layout()
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
        rank_layout=layout,
    )


def reload_megatron_nccl_groups(
    snapshot: Mapping[str, int],
    *,
    expected_layout: Mapping[str, list[Any]] | None = None,
    **init_kwargs: Any,
) -> None:
    """Rebuild Megatron's process groups from a destroy snapshot, then synchronise.

    A no-op when Megatron is already initialised with the same configuration (then a
    collective only if ``expected_layout`` is given).

    Args:
        snapshot: ``NcclOffloadResult.snapshot`` from ``destroy_megatron_nccl_groups``.
        expected_layout: ``NcclOffloadResult.rank_layout``; when given, every rank
            checks that its tensor, pipeline, data, context, model and expert groups
            have the members the destroyed ones had, and all ranks raise together if
            any rank's differ. Options that only change other groups (distributed
            optimizer instances, hierarchical context parallel, embedding ranks) are
            not detected: pass those back in ``init_kwargs``.
        **init_kwargs: further ``initialize_model_parallel`` options of the original
            call, which the sizes in the snapshot do not record (``order``,
            ``distributed_timeout_minutes``, ``nccl_communicator_config_path``, ...).

    Raises:
        ValueError: the snapshot is empty (the destroy ran while nothing was
            initialised, so there is no configuration to rebuild), its keys are not
            those of a destroy snapshot, or ``init_kwargs`` repeats a snapshot key.
        NcclOffloadError: Megatron is initialised with a different configuration, or
            the rebuilt groups differ from ``expected_layout`` on some rank (Megatron
            is then left initialised with the rebuilt groups).
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
    repeated = sorted(set(init_kwargs) & (set(_SNAPSHOT_GETTERS) | {_VIRTUAL_PP_KEY}))
    if repeated:
        raise ValueError(
            f"reload_megatron_nccl_groups: {repeated} come from the snapshot; pass "
            "only the other initialize_model_parallel options as keyword arguments."
        )
    if parallel_state.model_parallel_is_initialized():
        current = _parallel_config_snapshot()
        if current != dict(snapshot):
            raise NcclOffloadError(
                "reload_megatron_nccl_groups: Megatron is already initialised with "
                f"{current}, not the snapshot {dict(snapshot)}; destroy it first."
            )
        if expected_layout is not None:
            _agree_on_layout(expected_layout, "the live groups (already initialised)")
        return
    # Keyword by keyword (not **snapshot): each value reaches the parameter of its type.
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=snapshot["tensor_model_parallel_size"],
        pipeline_model_parallel_size=snapshot["pipeline_model_parallel_size"],
        virtual_pipeline_model_parallel_size=snapshot.get(_VIRTUAL_PP_KEY),
        context_parallel_size=snapshot["context_parallel_size"],
        expert_model_parallel_size=snapshot["expert_model_parallel_size"],
        expert_tensor_parallel_size=snapshot["expert_tensor_parallel_size"],
        **init_kwargs,
    )
    if expected_layout is None:
        dist.barrier()
        return
    _agree_on_layout(expected_layout, "the rebuilt groups")


def _agree_on_layout(expected: Mapping[str, list[Any]], what: str) -> None:
    """All ranks exchange their layout check and raise together if any rank's differs.

    One decision for all ranks: a rank whose groups differ must not be the only one to
    stop, or its peers would block in their next collective.
    """
    try:
        mismatch = _layout_mismatch(expected)
    except Exception as exc:  # every rank must reach the exchange, whatever failed
        mismatch = f"rank {dist.get_rank()} could not read its groups: {exc}"
    outcomes: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(outcomes, mismatch)
    mismatches = [outcome for outcome in outcomes if outcome is not None]
    if mismatches:
        raise NcclOffloadError(
            f"reload_megatron_nccl_groups: {what} differ from the destroyed ones "
            f"({mismatches[0]}; {len(mismatches)} rank(s) differ). The original "
            "initialize_model_parallel call used options the snapshot does not "
            "record (e.g. order=...): pass them as keyword arguments to the reload."
        )
