"""mcore_grpo.worker.memory.nccl_offload for real: world size 2 on CPU, gloo standing in for NCCL.

The whole module is ONE spawn of 2 processes (importing megatron.core costs ~20 s per
process here): `_rank_main` runs every scenario on both ranks and records what it saw in
a JSON file per rank; the tests below assert on those records. A scenario that raised
records the exception, so each test fails with the rank's traceback.

Under gloo every group has the gloo backend, so the default predicate (skip Gloo groups)
would select nothing; the scenarios pass `_not_gloo_helper`, which treats every group
except Megatron's `*_GLOO` helper groups as NCCL-like, i.e. exactly what the default
selects on a GPU job.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import warm_spawn
from tests.support.ports import free_port

WORLD_SIZE = 2
CYCLE_MODES = ("manual", "manual", "official")  # three destroy -> reload cycles


def _not_gloo_helper(name: str, group: Any) -> bool:
    """Gloo stand-in for NCCL: every group but Megatron's `*_GLOO` helper groups."""
    return not name.endswith("_GLOO")


def _all_reduce_sum(group: Any, value: float) -> float:
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([value])
    dist.all_reduce(tensor, group=group)
    return float(tensor.item())


def _cycles(tp: int, rank: int) -> list[dict[str, Any]]:
    """Initialise TP=`tp`, then run the destroy -> reload cycles; one record per cycle."""
    import torch.distributed as dist
    from mcore_grpo.worker.memory.nccl_offload import (
        destroy_megatron_nccl_groups,
        reload_megatron_nccl_groups,
    )
    from megatron.core import parallel_state as ps

    ps.initialize_model_parallel(tensor_model_parallel_size=tp)
    records = []
    for mode in CYCLE_MODES:
        before = dict(_groups_of_interest())
        result = destroy_megatron_nccl_groups(mode, is_nccl_like=_not_gloo_helper)
        live = dist.distributed_c10d._world.pg_map
        record: dict[str, Any] = {
            "mode": mode,
            "snapshot": result.snapshot,
            "groups_destroyed": result.groups_destroyed,
            "bytes_freed": result.bytes_freed,
            "initialized_after_destroy": ps.model_parallel_is_initialized(),
            "gloo_global_after_destroy": ps._DATA_PARALLEL_GROUP_GLOO is not None,
            # destroyed means gone from torch's registry, not merely forgotten
            "destroyed_still_registered": [n for n in result.groups_destroyed if before[n] in live],
        }
        reload_megatron_nccl_groups(result.snapshot)
        reload_megatron_nccl_groups(result.snapshot)  # idempotent when already rebuilt
        record["initialized_after_reload"] = ps.model_parallel_is_initialized()
        record["tp_size"] = ps.get_tensor_model_parallel_world_size()
        record["dp_size"] = ps.get_data_parallel_world_size()
        record["tp_all_reduce"] = _all_reduce_sum(ps.get_tensor_model_parallel_group(), rank + 1)
        record["dp_all_reduce"] = _all_reduce_sum(ps.get_data_parallel_group(), rank + 1)
        after = {id(g) for _, g in _groups_of_interest()}
        record["groups_rebuilt_as_new_objects"] = not ({id(g) for g in before.values()} & after)
        records.append(record)
    return records


def _groups_of_interest() -> list[tuple[str, Any]]:
    from mcore_grpo.worker.memory.nccl_offload import find_megatron_process_groups

    return find_megatron_process_groups(_not_gloo_helper)


def _uninitialised(rank: int) -> dict[str, Any]:
    from mcore_grpo.worker.memory.nccl_offload import (
        destroy_megatron_nccl_groups,
        reload_megatron_nccl_groups,
    )

    first = destroy_megatron_nccl_groups()
    second = destroy_megatron_nccl_groups("official")
    try:
        reload_megatron_nccl_groups(first.snapshot)
    except ValueError as exc:
        empty_error = str(exc)
    else:
        empty_error = None
    return {
        "snapshots": [first.snapshot, second.snapshot],
        "destroyed": [first.groups_destroyed, second.groups_destroyed],
        "empty_snapshot_error": empty_error,
    }


def _default_predicate_on_gloo(rank: int) -> dict[str, Any]:
    """Under gloo the default predicate must select nothing (it only skips Gloo)."""
    from mcore_grpo.worker.memory.nccl_offload import (
        destroy_megatron_nccl_groups,
        find_megatron_process_groups,
    )
    from megatron.core import parallel_state as ps

    ps.initialize_model_parallel(tensor_model_parallel_size=2)
    all_groups = find_megatron_process_groups(lambda name, group: True)
    result = destroy_megatron_nccl_groups("manual")
    return {
        "groups_found_with_any_predicate": len(all_groups),
        "gloo_helpers_found": sorted(n for n, _ in all_groups if n.endswith("_GLOO")),
        "groups_destroyed": result.groups_destroyed,
        "initialized_after_destroy": ps.model_parallel_is_initialized(),
    }


def _failure_injection(rank: int) -> dict[str, Any]:
    import torch.distributed as dist
    from mcore_grpo.worker.memory.nccl_offload import NcclOffloadError, destroy_megatron_nccl_groups
    from megatron.core import parallel_state as ps

    out: dict[str, Any] = {}
    ps.initialize_model_parallel(tensor_model_parallel_size=1)
    expected = _groups_of_interest()[1][0]  # the second group destroyed
    real_destroy = dist.destroy_process_group
    calls: list[int] = []

    def failing_destroy(group: Any = None) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected destroy_process_group failure")
        real_destroy(group)

    dist.destroy_process_group = failing_destroy
    try:
        destroy_megatron_nccl_groups("manual", is_nccl_like=_not_gloo_helper)
    except NcclOffloadError as exc:
        out["destroy_error"] = str(exc)
        out["destroy_error_cause"] = repr(exc.__cause__)
    else:
        out["destroy_error"] = None
    finally:
        dist.destroy_process_group = real_destroy
    out["expected_group"] = expected
    ps.destroy_model_parallel()

    ps.initialize_model_parallel(tensor_model_parallel_size=1)
    real_reset = ps.destroy_model_parallel

    def failing_reset() -> None:
        raise RuntimeError("injected residual reset failure")

    ps.destroy_model_parallel = failing_reset
    try:
        destroy_megatron_nccl_groups("official")
    except NcclOffloadError as exc:
        out["reset_error"] = str(exc)
    else:
        out["reset_error"] = None
    finally:
        ps.destroy_model_parallel = real_reset
    ps.destroy_model_parallel()
    return out


def _scenarios() -> dict[str, Callable[[int], Any]]:
    return {
        "uninitialised": _uninitialised,
        "tp2": lambda rank: _cycles(2, rank),
        "tp1_dp2": lambda rank: _cycles(1, rank),
        "default_predicate_on_gloo": _default_predicate_on_gloo,
        "failure_injection": _failure_injection,
    }


def _rank_main(rank: int, port: int, out_dir: str) -> None:
    """Entry point of each spawned rank: run every scenario, record results as JSON."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    results: dict[str, Any] = {}
    for name, scenario in _scenarios().items():
        try:
            results[name] = {"ok": scenario(rank)}
        except Exception:
            results[name] = {"error": traceback.format_exc()}
        if ps.model_parallel_is_initialized():
            ps.destroy_model_parallel()
        dist.barrier()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results, indent=1))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Start the 2 ranks once for the module (forked warm: tests/support/warm_spawn.py); their
    per-scenario records. torch's spawn stops at the first rank that raises (the error names
    it, with its traceback) or exits (its exit code), and terminates the other, which would
    otherwise wait in a collective."""
    import torch.multiprocessing as torch_mp

    out_dir = tmp_path_factory.mktemp("nccl_offload")
    ctx = warm_spawn.context()
    torch_mp.spawn(
        warm_spawn.with_environment(_rank_main, dict(os.environ)),
        args=(free_port(), str(out_dir)),
        nprocs=WORLD_SIZE,
        join=True,
        start_method=ctx.get_start_method(),
    )
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(WORLD_SIZE)]


def _ok(ranks: list[dict[str, Any]], scenario: str) -> Iterator[tuple[int, Any]]:
    for rank, results in enumerate(ranks):
        record = results[scenario]
        assert "error" not in record, f"rank {rank}, scenario {scenario}:\n{record['error']}"
        yield rank, record["ok"]


@pytest.mark.parametrize(
    ("scenario", "tp", "dp"), [("tp2", 2, 1), ("tp1_dp2", 1, 2)], ids=["tp2", "tp1_dp2"]
)
def test_destroy_reload_cycles(ranks: list[dict[str, Any]], scenario: str, tp: int, dp: int):
    for _rank, cycles in _ok(ranks, scenario):
        assert [c["mode"] for c in cycles] == list(CYCLE_MODES)
        for cycle in cycles:
            assert cycle["initialized_after_destroy"] is False
            assert cycle["gloo_global_after_destroy"] is False
            assert cycle["initialized_after_reload"] is True
            assert cycle["snapshot"]["tensor_model_parallel_size"] == tp
            assert cycle["snapshot"]["pipeline_model_parallel_size"] == 1
            assert (cycle["tp_size"], cycle["dp_size"]) == (tp, dp)
            assert cycle["groups_rebuilt_as_new_objects"] is True
            assert cycle["bytes_freed"] is None  # no CUDA here


@pytest.mark.parametrize("scenario", ["tp2", "tp1_dp2"])
def test_all_reduce_on_rebuilt_groups(ranks: list[dict[str, Any]], scenario: str):
    tp_sum, dp_sum = (3.0, None) if scenario == "tp2" else (None, 3.0)
    for rank, cycles in _ok(ranks, scenario):
        for cycle in cycles:
            # ranks contribute 1 and 2; a size-1 group returns the rank's own value
            assert cycle["tp_all_reduce"] == (tp_sum or rank + 1)
            assert cycle["dp_all_reduce"] == (dp_sum or rank + 1)


@pytest.mark.parametrize("scenario", ["tp2", "tp1_dp2"])
def test_manual_mode_destroys_groups_but_not_gloo_helpers(
    ranks: list[dict[str, Any]], scenario: str
):
    for _rank, cycles in _ok(ranks, scenario):
        for cycle in cycles:
            names = cycle["groups_destroyed"]
            if cycle["mode"] == "official":
                assert names == []
                continue
            assert "_TENSOR_MODEL_PARALLEL_GROUP" in names
            assert "_DATA_PARALLEL_GROUP" in names
            assert len(names) == len(set(names))
            assert cycle["destroyed_still_registered"] == []
            assert not [n for n in names if n.endswith("_GLOO")]


def test_default_predicate_only_skips_gloo(ranks: list[dict[str, Any]]):
    for _rank, record in _ok(ranks, "default_predicate_on_gloo"):
        assert record["groups_found_with_any_predicate"] > len(record["gloo_helpers_found"])
        assert "_DATA_PARALLEL_GROUP_GLOO" in record["gloo_helpers_found"]
        assert record["groups_destroyed"] == []  # every group is gloo here
        assert record["initialized_after_destroy"] is False


def test_failed_destroy_raises_with_group_name(ranks: list[dict[str, Any]]):
    for _rank, record in _ok(ranks, "failure_injection"):
        assert record["destroy_error"] is not None, "a failing destroy_process_group was swallowed"
        assert f"parallel_state.{record['expected_group']} failed" in record["destroy_error"]
        assert "injected destroy_process_group failure" in record["destroy_error_cause"]


def test_failed_residual_reset_raises(ranks: list[dict[str, Any]]):
    for _rank, record in _ok(ranks, "failure_injection"):
        assert record["reset_error"] is not None, "a failing destroy_model_parallel was swallowed"
        assert "destroy_model_parallel()" in record["reset_error"]
        assert "injected residual reset failure" in record["reset_error"]


def test_idempotent_when_nothing_initialised(ranks: list[dict[str, Any]]):
    for _rank, record in _ok(ranks, "uninitialised"):
        assert record["snapshots"] == [{}, {}]
        assert record["destroyed"] == [[], []]


def test_empty_snapshot_is_a_clear_error(ranks: list[dict[str, Any]]):
    for _rank, record in _ok(ranks, "uninitialised"):
        assert record["empty_snapshot_error"] is not None
        assert "empty snapshot" in record["empty_snapshot_error"]
        assert "initialize_model_parallel" in record["empty_snapshot_error"]


@pytest.mark.parametrize(
    ("snapshot", "named"),
    [
        ({"tensor_model_parallel_size": 2}, "pipeline_model_parallel_size"),
        (
            {
                "tensor_model_parallel_size": 1,
                "pipeline_model_parallel_size": 1,
                "context_parallel_size": 1,
                "expert_model_parallel_size": 1,
                "expert_tensor_parallel_size": 1,
                "order": 1,
            },
            "'order'",
        ),
    ],
)
def test_snapshot_with_wrong_keys_is_a_clear_error(snapshot: dict[str, int], named: str):
    """A hand-made snapshot is refused before anything is checked or built: no size falls
    back to a default, no key reaches initialize_model_parallel unchecked."""
    from mcore_grpo.worker.memory.nccl_offload import reload_megatron_nccl_groups

    with pytest.raises(ValueError, match=r"pass NcclOffloadResult\.snapshot unchanged") as err:
        reload_megatron_nccl_groups(snapshot)
    assert named in str(err.value)
