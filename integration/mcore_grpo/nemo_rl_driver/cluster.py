"""The nemo-rl driver's placement: NeMo-RL's own `RayVirtualCluster`, as its `setup()` builds it.

NeMo-RL's GRPO `setup()` makes ``RayVirtualCluster(bundle_ct_per_node_list=[gpus_per_node] *
num_nodes, use_gpus=True, num_gpus_per_node=gpus_per_node, max_colocated_worker_groups=1)``
for a colocated Megatron policy; its worker groups put rank r in bundle ``r % per_node`` of
node group ``r // per_node``, and meet at `get_master_address_and_port()` (rank 0's node, a
port in NeMo-RL's master port range). Here the same, with two differences a CPU run needs: the
bundles ask for no GPU when ``policy.device=cpu`` (``use_gpus=False``), and ``per_node`` is
``--workers / cluster.num_nodes`` (on a GPU preset that is ``cluster.gpus_per_node``).
"""

from __future__ import annotations

from typing import Any

from mcore_grpo.grpo.cluster.placement import PlacementError, live_nodes, ranks_per_node

CLUSTER_NAME = "mcore-grpo-nemo-rl"  # its placement groups are "<name>-node<i>"


class VirtualClusterPlacement:
    """A `mcore_grpo.grpo.cluster.placement.Placement` over NeMo-RL's `RayVirtualCluster`."""

    def __init__(self, ray: Any, world_size: int, num_nodes: int, gpu: bool) -> None:
        from nemo_rl.distributed.virtual_cluster import (
            RayVirtualCluster,
            ResourceInsufficientError,
        )

        per_node = ranks_per_node(world_size, num_nodes)
        self.cluster = RayVirtualCluster(
            bundle_ct_per_node_list=[per_node] * num_nodes,
            use_gpus=gpu,
            num_gpus_per_node=per_node,
            max_colocated_worker_groups=1,
            name=CLUSTER_NAME,
        )
        try:
            self._groups = self.cluster.get_placement_groups()
        except (ResourceInsufficientError, TimeoutError) as err:
            self.cluster.shutdown()
            # NeMo-RL's own message is generic ("Maximum number of retries reached ..."); the
            # live nodes say what is missing.
            raise PlacementError(
                f"NeMo-RL's RayVirtualCluster could not place {num_nodes} node(s) x {per_node} "
                f"worker(s) ({'1 CPU 1 GPU' if gpu else '1 CPU'} each; {type(err).__name__}); "
                f"its live nodes: {live_nodes(ray)}. Lower --workers or cluster.num_nodes, or "
                "add nodes"
            ) from None

    def groups(self) -> list[Any]:
        """NeMo-RL's per-node placement groups, in node order."""
        return self._groups

    def rendezvous(self) -> tuple[str, int]:
        """NeMo-RL's master address and port: rank 0's node, a port in its range."""
        return self.cluster.get_master_address_and_port()

    def release(self) -> None:
        """NeMo-RL's own teardown (removes its placement groups)."""
        self.cluster.shutdown()
