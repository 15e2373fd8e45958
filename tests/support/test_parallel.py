"""tests/support/parallel.py: the groups megatron-core forgets are destroyed, its current ones
kept (the suite ran 3x slower while thousands of gloo threads piled up)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from tests.support.parallel import Layout, parallel_layout, release_forgotten_groups


def _groups() -> int:
    return sum(g is not None for g in c10d._world.pg_map)


def test_forgotten_groups_are_destroyed_and_megatron_s_current_ones_kept(world1: None) -> None:
    from megatron.core import parallel_state as ps

    release_forgotten_groups()  # what earlier tests of this process left
    with parallel_layout(Layout()):
        pass  # set up, then put back: megatron-core forgets the groups it made
    with parallel_layout(Layout()):
        before = _groups()
        released = release_forgotten_groups()
        assert released > 0 and _groups() == before - released
        assert release_forgotten_groups() == 0  # megatron-core's current groups are kept
        total = torch.ones(1)
        dist.all_reduce(total, group=ps.get_data_parallel_group())
        assert total.item() == 1.0
