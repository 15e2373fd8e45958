"""Runs the policy ranks: in-process (one rank) or as Ray actors joined by torch.distributed.

Named "runner", not "engine": in this package "engine" means an inference engine (see
`mcore_grpo.worker.engine_lifecycle`).

`RayRunner` starts Ray locally when no cluster address is given (``RAY_ADDRESS`` or
``address=``), places one `PolicyRank` actor per worker over ``cluster.num_nodes`` nodes
(`mcore_grpo.grpo.cluster.placement`; gloo on CPU, NCCL on GPU, one process group over all of them,
meeting at rank 0's node) and calls every actor for each phase of a step. It waits on all
calls together: when a worker raises, dies, loses its node or stops answering, the call ends
with that worker named (`WorkerFailed`, its cause found by `mcore_grpo.grpo.cluster.fault`) and the
other actors are killed, so a peer blocked in a collective on the dead worker cannot hang the
run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from mcore_grpo.config.schema import RunConfig
from mcore_grpo.grpo.cluster import fault, placement
from mcore_grpo.grpo.cluster.cluster_attach import attach
from mcore_grpo.grpo.cluster.local_ray import start_local_ray, stop_local_ray
from mcore_grpo.grpo.cluster.placement import NodeGroups, Placement, WorkerPlace, free_port
from mcore_grpo.grpo.cluster.ray_import import before_ray_import
from mcore_grpo.grpo.ranks.messages import TaskTokens
from mcore_grpo.grpo.ranks.rank import PolicyRank
from mcore_grpo.run_output import upstream_output

# Reserves a run's placement groups: (ray, world_size, num_nodes, gpu) -> Placement.
PlacementFactory = Callable[[Any, int, int, bool], Placement]


class WorkerFailed(RuntimeError):
    """A policy worker raised, died or went silent; the message names it and the cause.
    `repeats`: the error's class name when the worker failed to start with an error a rerun
    raises again (`fault.REPEATING`), so the command line does not say to run again."""

    def __init__(self, message: str, *, repeats: str | None = None) -> None:
        super().__init__(message)
        self.repeats = repeats


class Runner(Protocol):
    """What the GRPO loop needs from the workers."""

    world_size: int
    places: list[WorkerPlace]

    def call(self, method: str, per_rank_args: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Call `method` on every rank with its own args; results in rank order."""
        ...

    def shutdown(self) -> None:
        """Stop the workers."""
        ...


class LocalRunner:
    """One rank in this process (tests, debugging, ``--in-process``). Its upstream code prints
    where a Ray actor's does (`upstream_output`: the held-back file of a CLI run), and a
    failure, also while the rank is built, is a `WorkerFailed` as from an actor."""

    world_size = 1

    def __init__(
        self, config: RunConfig, tokens: TaskTokens, *, fail_at_step: int | None = None
    ) -> None:
        port = free_port()
        try:
            with upstream_output():
                self.rank = PolicyRank(
                    config, tokens, 0, 1, "127.0.0.1", port, fail_at_step=fail_at_step
                )
        except Exception as err:
            raise WorkerFailed(
                f"worker rank 0 failed to start: {err!r}", repeats=fault.repeating_error(err)
            ) from err
        self.places = [WorkerPlace(0, "local", "127.0.0.1", os.getpid())]

    def call(self, method: str, per_rank_args: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Call the method directly; exceptions propagate as `WorkerFailed`."""
        (args,) = per_rank_args
        try:
            with upstream_output():
                return [getattr(self.rank, method)(*args)]
        except Exception as err:
            raise WorkerFailed(f"worker rank 0 failed in {method}: {err!r}") from err

    def shutdown(self) -> None:
        """Destroy the process group so another runner can start in this process."""
        with upstream_output():
            self.rank.shutdown()


class RayRunner:
    """`world_size` Ray actors, each one `PolicyRank`."""

    def __init__(
        self,
        config: RunConfig,
        tokens: TaskTokens,
        world_size: int,
        *,
        address: str | None = None,
        fail_at_rank: int | None = None,
        fail_at_step: int | None = None,
        rank_cls: type[PolicyRank] = PolicyRank,
        placement_factory: PlacementFactory = NodeGroups,
    ) -> None:
        """`rank_cls`: the actor class (a `PolicyRank`; NeMo-RL's driver passes its subclass);
        `placement_factory`: who reserves the nodes (NeMo-RL's driver: its `RayVirtualCluster`)."""
        before_ray_import()  # the actors run this interpreter, not a nested `uv run`
        import ray

        self.world_size = world_size
        self._ray: Any = ray  # imported here: after `before_ray_import`
        self._started_ray = False
        self.collective_timeout_s = config.cluster.collective_timeout_s
        self.fault_wait_s = config.cluster.fault_wait_s
        gpu = config.policy.device == "cuda"
        per_node = placement.ranks_per_node(world_size, config.cluster.num_nodes)
        self._join_ray(address or os.environ.get("RAY_ADDRESS"))
        self.actors: list[Any] = []
        self.places: list[WorkerPlace] = []
        self.placement: Placement | None = None
        # The first failure, once the actors are killed for it. Callers may still have calls
        # queued (NeMo-RL's rollout submits generation batches from concurrent coroutines):
        # each is answered with this failure, not dispatched to actors that no longer exist.
        self.failure: WorkerFailed | None = None
        try:
            self.placement = placement_factory(ray, world_size, config.cluster.num_nodes, gpu)
            self._start_actors(
                self.placement, config, tokens, rank_cls, per_node, fail_at_rank, fail_at_step
            )
            # Until the actors report where they run, a failure names the rank only.
            self.places = [WorkerPlace(rank, "", "", 0) for rank in range(world_size)]
            self.places = self.call("ready", [()] * world_size)
        except BaseException:
            self.shutdown()
            raise

    def _join_ray(self, address: str | None) -> None:
        """Attach to the cluster at `address`, or start Ray on this machine, unless this
        process has Ray already (then it is not ours to stop)."""
        if not self._ray.is_initialized():
            if address:
                attach(self._ray, address)
            else:
                start_local_ray(self.world_size)
            self._started_ray = True

    def _start_actors(
        self,
        reserved: Placement,
        config: RunConfig,
        tokens: TaskTokens,
        rank_cls: type[PolicyRank],
        per_node: int,
        fail_at_rank: int | None,
        fail_at_step: int | None,
    ) -> None:
        """One `rank_cls` actor per rank in its bundle of `reserved`, all meeting at its
        rendezvous (the actors build their ranks; nothing waits for them here)."""
        gpu = config.policy.device == "cuda"
        groups = reserved.groups()
        host, port = reserved.rendezvous()
        # Each CPU actor gets an equal share of its node's cores for its torch threads.
        threads = None if gpu else max(1, (os.cpu_count() or 1) // per_node)
        actor_cls = self._ray.remote(num_cpus=1, num_gpus=1 if gpu else 0, max_restarts=0)(rank_cls)
        for rank in range(self.world_size):
            group, bundle = placement.bundle_of(rank, per_node)
            options = {"scheduling_strategy": placement.strategy_for(groups[group], bundle)}
            self.actors.append(
                actor_cls.options(**options).remote(  # type: ignore[attr-defined]
                    config,
                    tokens,
                    rank,
                    self.world_size,
                    host,
                    port,
                    num_threads=threads,
                    fail_at_step=fail_at_step if rank == fail_at_rank else None,
                )
            )

    def call(self, method: str, per_rank_args: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Dispatch to all actors; a failure kills the rest and raises, naming its cause.
        After a failure every call raises that failure again."""
        if self.failure is not None:
            raise WorkerFailed(str(self.failure)) from self.failure
        ray = self._ray
        refs = [
            getattr(actor, method).remote(*args)
            for actor, args in zip(self.actors, per_rank_args, strict=True)
        ]
        faults = fault.gather(
            ray,
            refs,
            self.places,
            collective_timeout_s=self.collective_timeout_s,
            fault_wait_s=self.fault_wait_s,
        )
        if faults:
            self.kill()
            self.failure = WorkerFailed(
                fault.describe(
                    faults,
                    method,
                    collective_timeout_s=self.collective_timeout_s,
                    fault_wait_s=self.fault_wait_s,
                ),
                # "ready" is the first call: an actor whose construction raised fails it.
                repeats=fault.repeating_fault(faults) if method == "ready" else None,
            )
            raise self.failure
        return ray.get(refs)

    def kill(self) -> None:
        """Kill every actor now (no graceful teardown: peers may sit in a collective)."""
        for actor in self.actors:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:
                continue
        self.actors = []

    def shutdown(self) -> None:
        """Kill the actors, free their placement and stop Ray if this runner started it."""
        if self.actors:
            self.kill()
        if self.placement is not None:
            self.placement.release()
            self.placement = None
        if self._started_ray and self._ray.is_initialized():
            # Give the raylet a moment to reap the actors before shutting it down.
            time.sleep(0.1)
            stop_local_ray()


def make_runner(
    config: RunConfig,
    tokens: TaskTokens,
    workers: int,
    *,
    in_process: bool = False,
    fail_at_rank: int | None = None,
    fail_at_step: int | None = None,
) -> Runner:
    """Local runner for ``in_process`` (one worker only), Ray actors otherwise."""
    if in_process:
        if workers != 1:
            raise ValueError(f"--in-process runs exactly one worker, got --workers {workers}")
        return LocalRunner(
            config, tokens, fail_at_step=fail_at_step if fail_at_rank in (None, 0) else None
        )
    return RayRunner(config, tokens, workers, fail_at_rank=fail_at_rank, fail_at_step=fail_at_step)
