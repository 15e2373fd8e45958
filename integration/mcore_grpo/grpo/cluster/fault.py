"""Naming the cause when a call across the Ray ranks fails.

The first error the driver sees is often a consequence, not the cause: when a node dies, its
peers' gloo collectives fail within milliseconds ("Connection closed by peer") while Ray takes
its health-check period (about 15 s by default) to declare the node dead; a rank stopped with
SIGSTOP shows up only as a peer's collective timeout. So after the first failure the driver
keeps listening for `fault_wait_s` for the cause, and names the first cause found, in this
order: a node lost, a worker process died, a worker raised, a worker stopped answering.

A call in which some ranks have answered and another has not within `collective_timeout_s`
counts as that rank not answering: the bound of every phase, collectives or not.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcore_grpo.grpo.cluster.placement import WorkerPlace

# What a torch.distributed collective raises when a peer is gone or silent (gloo and NCCL).
COLLECTIVE_ERROR_MARKERS = (
    "gloo/transport",
    "Connection closed by peer",
    "Connection reset by peer",
    "ProcessGroupNCCL",
    "NCCL error",
    "Watchdog caught collective operation timeout",
)
NODE_POLL_S = 0.5


class Cause(enum.IntEnum):
    """Why a rank did not answer; lower is the likelier root cause."""

    NODE_LOST = 0
    PROCESS_DIED = 1
    RAISED = 2
    NO_ANSWER = 3
    COLLECTIVE = 4  # a peer's failure seen through a collective: a consequence


@dataclass(frozen=True)
class RankFault:
    """One rank's failure."""

    place: WorkerPlace
    cause: Cause
    detail: str


def is_collective_error(text: str) -> bool:
    """Whether a worker's error is a collective failing on a peer (a consequence)."""
    return any(marker in text for marker in COLLECTIVE_ERROR_MARKERS)


def _node_alive(ray: Any, node_id: str) -> bool:
    return any(n["NodeID"] == node_id and n.get("Alive") for n in ray.nodes())


def classify(ray: Any, ref: Any, place: WorkerPlace) -> RankFault | None:
    """The fault of a finished call, or None if it returned."""
    try:
        ray.get(ref)
        return None
    except ray.exceptions.RayActorError as err:  # died or unreachable
        text = str(err)
        if "creation task" in text:  # its __init__ raised: the traceback is the cause
            return RankFault(place, Cause.RAISED, text)
        known = bool(place.node_id)  # unknown until the rank reported where it runs
        if "node has died" in text or (known and not _node_alive(ray, place.node_id)):
            return RankFault(place, Cause.NODE_LOST, "its node died")
        if isinstance(err, ray.exceptions.ActorUnavailableError):
            return RankFault(place, Cause.NO_ANSWER, "unreachable")
        return RankFault(place, Cause.PROCESS_DIED, "its worker process died")
    except ray.exceptions.RayTaskError as err:
        text = str(err)
        cause = Cause.COLLECTIVE if is_collective_error(text) else Cause.RAISED
        return RankFault(place, cause, text)


def _cause_known(faults: Sequence[RankFault]) -> bool:
    """Whether a fault that is itself a cause (not silence, not a consequence) is among them."""
    return any(f.cause <= Cause.RAISED for f in faults)


def settle_unreachable(ray: Any, faults: list[RankFault], deadline: float) -> list[RankFault]:
    """Unreachable ranks become NODE_LOST once Ray declares their node dead (until
    `deadline`); a rank still reachable-less then stays NO_ANSWER."""
    settled = list(faults)
    while any(f.cause == Cause.NO_ANSWER for f in settled) and time.monotonic() < deadline:
        settled = [
            RankFault(f.place, Cause.NODE_LOST, "its node died")
            if f.cause == Cause.NO_ANSWER
            and f.place.node_id
            and not _node_alive(ray, f.place.node_id)
            else f
            for f in settled
        ]
        if any(f.cause == Cause.NO_ANSWER for f in settled):
            time.sleep(NODE_POLL_S)
    return settled


def gather(
    ray: Any,
    refs: Sequence[Any],
    places: Sequence[WorkerPlace],
    *,
    collective_timeout_s: float,
    fault_wait_s: float,
) -> list[RankFault]:
    """Wait for every call; [] if all returned, else every rank's fault once the cause is
    known or `fault_wait_s` after the first fault (silent ranks then count as NO_ANSWER)."""
    rank_of = {ref: rank for rank, ref in enumerate(refs)}
    pending = list(refs)
    faults: list[RankFault] = []
    deadline: float | None = None  # set by the first answer (a fault or a result)
    first_fault_at: float | None = None
    while pending:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        done, pending = ray.wait(pending, num_returns=1, timeout=timeout)
        if not done:
            break  # the deadline passed with ranks silent
        for ref in done:
            fault = classify(ray, ref, places[rank_of[ref]])
            now = time.monotonic()
            if fault is None:
                if deadline is None:
                    deadline = now + collective_timeout_s
                continue
            faults.append(fault)
            if first_fault_at is None:
                first_fault_at = now
                deadline = now + fault_wait_s
        if _cause_known(faults):
            break  # the rest are consequences
    if not faults and not pending:
        return []
    faults += [RankFault(places[rank_of[ref]], Cause.NO_ANSWER, "no answer") for ref in pending]
    if not _cause_known(faults):  # the silent ranks' nodes may yet be declared dead
        wait_until = (first_fault_at or time.monotonic()) + fault_wait_s
        faults = settle_unreachable(ray, faults, wait_until)
    return sorted(faults, key=lambda f: (f.cause, f.place.rank))


# Errors a rank's start-up raises the same way on every try: the installed tree lacks what the
# worker imports, or the code cannot do what the config asks. A rerun repeats them.
REPEATING = (ImportError, NotImplementedError, TypeError, AttributeError)
_REPEATING_NAMES = {"ImportError", "ModuleNotFoundError", *(kind.__name__ for kind in REPEATING)}


def repeating_error(err: BaseException) -> str | None:
    """The error's class name when a rerun would raise it again (`REPEATING`), else None."""
    return type(err).__name__ if isinstance(err, REPEATING) else None


def repeating_fault(faults: Sequence[RankFault]) -> str | None:
    """`repeating_error` of the root fault, read from the raised error's last traceback line
    (`SomeError: message`), for a rank that raised; None for a lost, dead or silent one."""
    if not faults or faults[0].cause != Cause.RAISED:
        return None
    name = _last_line(faults[0].detail).split(":", 1)[0].rsplit(".", 1)[-1]
    return name if name in _REPEATING_NAMES else None


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1].strip() if lines else ""


def describe(
    faults: Sequence[RankFault], method: str, *, collective_timeout_s: float, fault_wait_s: float
) -> str:
    """The first line names the rank, its process and node, and the cause; a raised error's
    traceback follows it."""
    root = faults[0]
    who = f"worker rank {root.place.rank}"
    where = f"({root.place.where()})"
    if root.cause == Cause.NODE_LOST:
        return f"{who} was lost in {method} {where}: its node died"
    if root.cause == Cause.PROCESS_DIED:
        return f"{who} died in {method} {where}: its worker process exited"
    if root.cause == Cause.RAISED:
        return f"{who} failed in {method} {where}: {_last_line(root.detail)}\n{root.detail}"
    if root.cause == Cause.NO_ANSWER:
        return (
            f"{who} stopped answering in {method} {where}: silent "
            f"{collective_timeout_s:g} s after its peers (cluster.collective_timeout_s) and "
            f"{fault_wait_s:g} s more (cluster.fault_wait_s); a stopped (SIGSTOP) or hung process"
        )
    return (
        f"{who} failed in {method} in a collective {where}, and no other cause showed within "
        f"{fault_wait_s:g} s (cluster.fault_wait_s): {_last_line(root.detail)}"
    )
