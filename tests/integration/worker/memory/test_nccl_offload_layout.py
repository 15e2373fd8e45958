"""A reload that rebuilds different groups than were destroyed is refused, on every rank.

4 gloo ranks, TP=2 x DP=2, first set up with `order="dp-tp-cp-ep-pp"` (tensor-parallel
groups {0,2} and {1,3}). The sizes in the destroy snapshot alone rebuild the default order
(groups {0,1} and {2,3}): with `expected_layout` every rank raises. Passing the original
`order` to the reload rebuilds the destroyed groups, and an all-reduce on them sums right.
When only one rank's groups differ, every rank raises all the same (its peers must not go
on into a collective it will never join).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

from tests.integration.worker.harness import spawn_ranks
from tests.support.device import MULTI_RANK_CPU
from tests.support.ports import free_port

pytestmark = pytest.mark.cpu_only(reason=MULTI_RANK_CPU)

ORDER = "dp-tp-cp-ep-pp"


def _rank() -> dict[str, Any]:
    from mcore_grpo.worker.memory.nccl_offload import (
        NcclOffloadError,
        destroy_megatron_nccl_groups,
        reload_megatron_nccl_groups,
    )
    from megatron.core import parallel_state as ps

    def everything(name: str, group: Any) -> bool:
        return True  # gloo stands in for NCCL: every group is destroyed

    ps.initialize_model_parallel(tensor_model_parallel_size=2, order=ORDER)
    result = destroy_megatron_nccl_groups(is_nccl_like=everything)
    out: dict[str, Any] = {"layout": result.rank_layout}
    try:
        reload_megatron_nccl_groups(result.snapshot, expected_layout=result.rank_layout)
        out["without_order"] = ""
    except NcclOffloadError as exc:
        out["without_order"] = str(exc)
    out["default_tp"] = dist.get_process_group_ranks(ps.get_tensor_model_parallel_group())
    destroy_megatron_nccl_groups(is_nccl_like=everything)
    try:
        reload_megatron_nccl_groups(result.snapshot, tensor_model_parallel_size=2)
    except ValueError as exc:
        out["repeated_key"] = str(exc)
    reload_megatron_nccl_groups(result.snapshot, expected_layout=result.rank_layout, order=ORDER)
    tp_group = ps.get_tensor_model_parallel_group()
    out["rebuilt_tp"] = dist.get_process_group_ranks(tp_group)
    value = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(value, group=tp_group)
    out["tp_sum"] = float(value.item())
    # Only rank 3 expects other groups: still every rank must stop, for both paths.
    skewed = dict(result.rank_layout)
    if dist.get_rank() == 3:
        skewed["data_parallel"] = [3]
    for path in ("already_initialised", "rebuilt"):
        if path == "rebuilt":
            destroy_megatron_nccl_groups(is_nccl_like=everything)
        try:
            reload_megatron_nccl_groups(result.snapshot, expected_layout=skewed, order=ORDER)
            out[path] = ""
        except NcclOffloadError as exc:
            out[path] = str(exc)
    ps.destroy_model_parallel()
    return out


@pytest.fixture(scope="module")
def ranks() -> dict[int, Any]:
    return spawn_ranks(_rank, free_port(), world=4)


def test_destroyed_layout_is_recorded(ranks: dict[int, Any]) -> None:
    assert [ranks[r]["layout"]["tensor_model_parallel"] for r in range(4)] == [
        [0, 2],
        [1, 3],
        [0, 2],
        [1, 3],
    ]


def test_reload_with_sizes_only_is_refused_on_every_rank(ranks: dict[int, Any]) -> None:
    for rank in range(4):
        message = ranks[rank]["without_order"]
        assert "the rebuilt groups differ from the destroyed ones" in message, rank
        assert "4 rank(s) differ" in message and "order=" in message
    assert ranks[0]["default_tp"] == [0, 1]  # what the sizes alone rebuilt


def test_snapshot_keys_cannot_be_overridden(ranks: dict[int, Any]) -> None:
    assert "['tensor_model_parallel_size'] come from the snapshot" in ranks[0]["repeated_key"]


def test_reload_with_the_original_order_rebuilds_the_destroyed_groups(
    ranks: dict[int, Any],
) -> None:
    for rank in range(4):
        assert ranks[rank]["rebuilt_tp"] == ranks[rank]["layout"]["tensor_model_parallel"]
        expected = float(sum(ranks[rank]["rebuilt_tp"]))
        assert ranks[rank]["tp_sum"] == expected, rank


def test_one_rank_differing_stops_every_rank(ranks: dict[int, Any]) -> None:
    for path in ("already_initialised", "rebuilt"):
        for rank in range(4):
            message = ranks[rank][path]
            assert "rank 3's data_parallel group is ranks [2, 3]" in message, (path, rank)
            assert "ranks [3] before the destroy" in message, (path, rank)
            assert "1 rank(s) differ" in message, (path, rank)
