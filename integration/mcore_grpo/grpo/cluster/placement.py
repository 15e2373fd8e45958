"""Where the policy ranks run on a Ray cluster, and where torch.distributed meets.

Placement follows NeMo-RL's `RayVirtualCluster`: one placement group per node
(``cluster.num_nodes`` of them), each holding that node's share of the ranks, one bundle per
rank (1 CPU, plus 1 GPU on CUDA). Each group is STRICT_PACK, so a node's ranks share a node;
rank r is bundle ``r % per_node`` of group ``r // per_node``. On a cluster whose nodes each hold
one node's share of GPUs (the normal case), the groups land on distinct nodes.

The rendezvous (``MASTER_ADDR``/``MASTER_PORT``) is the IP and a free port of the node that
holds rank 0, found by a task run in rank 0's bundle, never ``localhost``: on more than one
machine the other ranks must reach it. The IP is the one Ray knows the node by (set with
``ray start --node-ip-address``); the interface torch binds is chosen with
``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` in the environment of ``ray start``.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

PLACEMENT_FILE = "placement.json"  # in the run's output directory
PLACEMENT_TIMEOUT_S = 180.0  # NeMo-RL's RayVirtualCluster waits as long for its groups


class PlacementError(RuntimeError):
    """The cluster cannot hold the requested layout."""


@dataclass(frozen=True)
class WorkerPlace:
    """Where one rank's actor runs (returned by the actor itself)."""

    rank: int
    node_id: str
    node_ip: str
    pid: int

    def where(self) -> str:
        """``pid 4242 on node 10.0.0.2, id 1a2b3c4d``."""
        if not self.pid:  # failed while starting, before it could say
            return "starting, its node not known yet"
        return f"pid {self.pid} on node {self.node_ip}, id {self.node_id[:8]}"


def ranks_per_node(world_size: int, num_nodes: int) -> int:
    """Each node's share of the ranks; refuses a layout that does not divide."""
    if num_nodes < 1 or world_size % num_nodes:
        raise PlacementError(
            f"--workers {world_size} does not divide over cluster.num_nodes={num_nodes}: "
            "give each node the same number of workers"
        )
    return world_size // num_nodes


def bundle_of(rank: int, per_node: int) -> tuple[int, int]:
    """(placement group index, bundle index) of `rank`."""
    return rank // per_node, rank % per_node


class Placement(Protocol):
    """The placement groups of one run: which bundle holds each rank, where the ranks meet.

    Two implementations: `NodeGroups` (this module, the mcore driver's) and NeMo-RL's own
    `RayVirtualCluster` behind `mcore_grpo.nemo_rl_driver.cluster.VirtualClusterPlacement`.
    """

    def groups(self) -> list[Any]:
        """The ready placement groups, one per node, in rank order."""
        ...

    def rendezvous(self) -> tuple[str, int]:
        """The IP and a free port of the node holding rank 0."""
        ...

    def release(self) -> None:
        """Remove the placement groups (their actors are already gone)."""
        ...


class NodeGroups:
    """One STRICT_PACK placement group per node, reserved at construction (`reserve`)."""

    def __init__(self, ray: Any, world_size: int, num_nodes: int, gpu: bool) -> None:
        self._ray = ray
        self._groups = reserve(ray, world_size, num_nodes, gpu)

    def groups(self) -> list[Any]:
        """The groups, one per node."""
        return self._groups

    def rendezvous(self) -> tuple[str, int]:
        """Found by a task in group 0's bundle 0 (`rendezvous`)."""
        return rendezvous(self._ray, self._groups[0])

    def release(self) -> None:
        """Remove the groups; a second call does nothing."""
        release(self._groups)
        self._groups = []


def reserve(ray: Any, world_size: int, num_nodes: int, gpu: bool) -> list[Any]:
    """One ready placement group per node; the cluster's resources named if it cannot."""
    from ray.util.placement_group import placement_group, remove_placement_group

    per_node = ranks_per_node(world_size, num_nodes)
    bundle = {"CPU": 1, "GPU": 1} if gpu else {"CPU": 1}
    groups = [
        placement_group([dict(bundle)] * per_node, strategy="STRICT_PACK", name=f"mcore-grpo-{n}")
        for n in range(num_nodes)
    ]
    try:
        ray.get([g.ready() for g in groups], timeout=PLACEMENT_TIMEOUT_S)
    except Exception as err:
        for group in groups:
            remove_placement_group(group)
        raise PlacementError(
            f"the Ray cluster could not place {num_nodes} node(s) x {per_node} worker(s) of "
            f"{bundle} each within {PLACEMENT_TIMEOUT_S:.0f} s ({type(err).__name__}); its live "
            f"nodes: {live_nodes(ray)}. Lower --workers or cluster.num_nodes, or add nodes"
        ) from None
    return groups


def live_nodes(ray: Any) -> str:
    """``10.0.0.1: 16 CPU 8 GPU, ...`` for the cluster's live nodes (for error lines)."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    have = ", ".join(
        f"{n['NodeManagerAddress']}: {n['Resources'].get('CPU', 0):g} CPU "
        f"{n['Resources'].get('GPU', 0):g} GPU"
        for n in nodes
    )
    return have or "none"


def release(groups: list[Any]) -> None:
    """Remove the placement groups (their actors are already gone)."""
    from ray.util.placement_group import remove_placement_group

    for group in groups:
        try:
            remove_placement_group(group)
        except Exception:
            continue


def strategy_for(group: Any, bundle: int) -> Any:
    """The scheduling strategy that puts an actor or task in `group`'s `bundle`."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(
        placement_group=group, placement_group_bundle_index=bundle
    )


def free_port() -> int:
    """An unused TCP port on this host (on all its interfaces)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _node_address() -> tuple[str, int]:
    import ray

    return ray.util.get_node_ip_address(), free_port()


def rendezvous(ray: Any, group: Any) -> tuple[str, int]:
    """The IP and a free port of the node holding `group`'s bundle 0 (rank 0)."""
    task = ray.remote(num_cpus=0)(_node_address)
    return ray.get(task.options(scheduling_strategy=strategy_for(group, 0)).remote())


def record(places: Sequence[WorkerPlace], output_dir: Path) -> str:
    """Write where each rank runs to ``placement.json`` in `output_dir` (for programs and for
    the fault messages' pids); returns the one-line summary for the log."""
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / PLACEMENT_FILE).write_text(
        json.dumps([asdict(p) for p in places], indent=1) + "\n"
    )
    nodes = {p.node_id for p in places}
    ranks = "; ".join(f"rank {p.rank} {p.where()}" for p in places)
    return f"{len(places)} worker(s) on {len(nodes)} node(s): {ranks}"
