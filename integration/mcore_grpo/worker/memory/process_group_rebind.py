"""Point DDP and the optimizer at rebuilt process groups after an NCCL destroy/reload cycle.

DDP bucket groups and the distributed optimizer keep references to the group objects that
existed when they were built. After `parallel_state` is destroyed and re-initialised those
objects are dead; this maps each old group to the new group stored under the same
`parallel_state` global and rewrites the references in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from mcore_grpo.worker.model import PolicyModel


@dataclass(frozen=True)
class GroupSnapshot:
    """`parallel_state` global name -> process group object at capture time."""

    groups: dict[str, Any]

    @classmethod
    def capture(cls) -> GroupSnapshot:
        """Read every process group held in a `parallel_state` module global."""
        from megatron.core import parallel_state

        return cls(
            {
                name: value
                for name, value in vars(parallel_state).items()
                if isinstance(value, dist.ProcessGroup)
            }
        )


def _owners(policy: PolicyModel) -> list[Any]:
    """Objects that hold group references: DDP, its bucket groups/buffers, the optimizers."""
    ddp, opt = policy.ddp, policy.optimizer
    owners: list[Any] = [ddp]
    for attr in (
        "bucket_groups",
        "expert_parallel_bucket_groups",
        "buffers",
        "expert_parallel_buffers",
    ):
        for item in getattr(ddp, attr, []) or []:
            owners.append(item)
            owners.extend(getattr(item, "buckets", []) or [])
    owners.append(opt)
    owners.extend(getattr(opt, "chained_optimizers", []) or [])
    # ProcessGroupCollection-style holders hanging off any of the above.
    for owner in list(owners):
        for value in list(vars(owner).values()):
            if (
                hasattr(value, "__dataclass_fields__")
                or type(value).__name__ == "ProcessGroupCollection"
            ):
                owners.append(value)
    return owners


def rebind_groups(before: GroupSnapshot, after: GroupSnapshot, policy: PolicyModel) -> int:
    """Replace references to `before` groups with the `after` group of the same name.

    Returns the number of references rewritten. Raises if a referenced old group has no
    counterpart (the reload built a different layout).
    """
    mapping: dict[int, Any] = {}
    for name, old in before.groups.items():
        if name in after.groups:
            mapping[id(old)] = after.groups[name]
    rewritten = 0
    for owner in _owners(policy):
        for attr, value in list(vars(owner).items()):
            if isinstance(value, dist.ProcessGroup) and id(value) in mapping:
                setattr(owner, attr, mapping[id(value)])
                rewritten += 1
    return rewritten
