"""GRPO on a Ray cluster of two nodes (a head and one more raylet, both on this machine, each
with one CPU): the ranks land one per node, the metrics equal a one-node run of the same
layout, and each fault ends the run in one line naming the lost worker, the last checkpoint
and the ``--resume`` command, which then reproduces the uninterrupted run.

Both nodes share this machine's IP, so "which node" is Ray's node id, not the address; the
rendezvous is still the node IP Ray reports for rank 0's node (never ``localhost``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcore_grpo.grpo.local_ray import NICENESS_ENV

from tests.integration.grpo.conftest import SHORT

pytestmark = [
    pytest.mark.cpu_only(reason="runs the cpu-tiny preset (policy.device=cpu) on Ray CPU nodes"),
    pytest.mark.slow,
]

TIMINGS = {"generation_time_s", "logprob_time_s", "training_time_s", "step_time_s"}
# Six steps, a checkpoint after each: a fault injected once step 2 is logged lands mid-run.
RUN = [*SHORT, "grpo.max_num_steps=6", "checkpointing.save_period=1", "cluster.num_nodes=2"]
FAST_FAULTS = ["cluster.collective_timeout_s=10", "cluster.fault_wait_s=20"]
NODE_ARGS: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 80 * 2**20}


class TwoNodes:
    """A head and a worker node, started (and restarted) by `ray.cluster_utils.Cluster`."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(
            initialize_head=True, head_node_args={**NODE_ARGS, "include_dashboard": False}
        )
        self.worker = self.cluster.add_node(**NODE_ARGS)
        self.cluster.wait_for_nodes()

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def node_ids(self) -> set[str]:
        head = self.cluster.head_node
        assert head is not None
        return {str(head.node_id), str(self.worker.node_id)}

    def kill_worker_node(self) -> str:
        """SIGKILL the worker node's raylet and everything on it; its node id."""
        node_id = str(self.worker.node_id)
        self.cluster.remove_node(self.worker, allow_graceful=False)
        return node_id

    def ensure_two(self) -> None:
        """A fresh worker node if the last one was killed."""
        if self.worker not in self.cluster.worker_nodes:
            self.worker = self.cluster.add_node(**NODE_ARGS)
            self.cluster.wait_for_nodes()

    def shutdown(self) -> None:
        self.cluster.shutdown()


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[TwoNodes]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv(NICENESS_ENV, "0")  # as start_local_ray does: see local_ray.py
        nodes = TwoNodes()
        try:
            yield nodes
        finally:
            nodes.shutdown()


def _env(address: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCORE_GRPO_INJECT")}
    env.pop("RAY_ADDRESS", None)
    if address is not None:
        env["RAY_ADDRESS"] = address
    return env


def _cmd(out: Path, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "mcore_grpo.cli", "--workers", "2", "--no-progress"]
    return [*cmd, "--output-dir", str(out), *extra]


def _run(out: Path, address: str | None, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _cmd(out, *extra, *RUN),
        env=_env(address),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _metrics(out: Path) -> list[dict]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in records]


def _places(out: Path) -> list[dict]:
    return json.loads((out / "placement.json").read_text())


@pytest.fixture(scope="module")
def uninterrupted(two_nodes: TwoNodes, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("two-nodes")
    done = _run(out, two_nodes.address)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.timeout(600)
def test_ranks_land_one_per_node_and_match_a_one_node_run(
    two_nodes: TwoNodes, uninterrupted: Path, tmp_path: Path
) -> None:
    places = _places(uninterrupted)
    assert [p["rank"] for p in places] == [0, 1]
    assert {p["node_id"] for p in places} == two_nodes.node_ids()  # one rank on each node
    assert all(p["node_ip"] not in ("127.0.0.1", "localhost") for p in places)
    one_node = tmp_path / "one-node"
    done = _run(one_node, None)  # a local Ray of its own, both ranks on one node
    assert done.returncode == 0, done.stderr[-3000:]
    assert len({p["node_id"] for p in _places(one_node)}) == 1
    assert _metrics(one_node) == _metrics(uninterrupted)


def _checkpoint_named(line: str) -> int:
    """The step of ``last checkpoint: step N (...)`` in the abort line."""
    return int(line.split("last checkpoint: step ")[1].split(" ")[0])


def _start_until_step_2(out: Path, address: str, *args: str) -> subprocess.Popen[str]:
    """A run started on the cluster, returned once it has logged step 2 (stderr to a file)."""
    stderr_path = out.parent / f"{out.name}.stderr"
    with stderr_path.open("w") as stderr_file:
        proc = subprocess.Popen(
            _cmd(out, *args),
            env=_env(address),
            stdout=subprocess.PIPE,
            stderr=stderr_file,
            text=True,
        )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("step   2/"):
            return proc
    proc.wait(timeout=60)
    pytest.fail(f"the run never logged step 2:\n{stderr_path.read_text()[-3000:]}")


def _run_until_fault(out: Path, address: str, inject: Any, *extra: str) -> tuple[str, float, int]:
    """Start a run, call `inject(out)` once step 2 is logged; the abort line, the seconds from
    the fault to the driver's exit, and the exit code."""
    proc = _start_until_step_2(out, address, *extra, *RUN, *FAST_FAULTS)
    stderr_path = out.parent / f"{out.name}.stderr"
    inject(out)
    fault_at = time.monotonic()
    try:
        proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the run did not end after the fault")
    ended_in = time.monotonic() - fault_at
    print(f"\n{out.parent.name}: ended {ended_in:.1f} s after the fault")  # figures for docs/
    aborted = [
        line for line in stderr_path.read_text().splitlines() if "mcore-grpo: run aborted" in line
    ]
    assert len(aborted) == 1, stderr_path.read_text()[-3000:]
    print(aborted[0])
    return aborted[0], ended_in, proc.returncode


def _resumes_to_the_uninterrupted_run(out: Path, address: str | None, line: str, ref: Path) -> None:
    named = _checkpoint_named(line)
    assert (out / "checkpoints/latest").read_text() == f"step_{named:06d}"
    assert f"--output-dir {out}" in line and line.endswith(" --resume")
    resumed = _run(out, address, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from step {named}" in resumed.stdout
    assert _metrics(out) == _metrics(ref)


def _pid_of(out: Path, rank: int) -> int:
    return int(_places(out)[rank]["pid"])


@pytest.mark.timeout(900)
def test_a_lost_node_ends_the_run_in_one_line_and_it_resumes_on_a_fresh_local_ray(
    two_nodes: TwoNodes, uninterrupted: Path, tmp_path: Path
) -> None:
    two_nodes.ensure_two()
    out = tmp_path / "run"
    lost: dict[str, Any] = {}

    def kill_node(run_dir: Path) -> None:
        lost["node"] = two_nodes.kill_worker_node()
        lost["rank"] = next(p["rank"] for p in _places(run_dir) if p["node_id"] == lost["node"])

    try:
        line, ended_in, code = _run_until_fault(out, two_nodes.address, kill_node)
    finally:
        two_nodes.ensure_two()
    assert code == 1
    assert f"worker rank {lost['rank']} was lost in " in line
    assert f"id {lost['node'][:8]}): its node died" in line
    # Ray's health checks declare the node dead in ~15 s; the driver waits for that, at most
    # cluster.fault_wait_s (20 s here) after the first failure, then ends.
    assert ended_in < 20 + 30, f"{ended_in:.1f} s"
    _resumes_to_the_uninterrupted_run(out, None, line, uninterrupted)


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("sig", "says", "bounds"),
    [
        # Ray reports a killed process's death at once.
        (signal.SIGKILL, ("worker rank 1 died in ", "its worker process exited"), (0, 15)),
        # A stopped one shows as silence: collective_timeout_s (10 s) + fault_wait_s (20 s),
        # plus the teardown.
        (
            signal.SIGSTOP,
            (
                "worker rank 1 stopped answering in ",
                "silent 10 s after its peers (cluster.collective_timeout_s) and 20 s more "
                "(cluster.fault_wait_s)",
            ),
            (10, 10 + 20 + 30),
        ),
    ],
    ids=["killed", "stopped"],
)
def test_a_killed_or_stopped_worker_ends_the_run_in_one_line_and_it_resumes(
    two_nodes: TwoNodes,
    uninterrupted: Path,
    tmp_path: Path,
    sig: signal.Signals,
    says: tuple[str, ...],
    bounds: tuple[float, float],
) -> None:
    two_nodes.ensure_two()
    out = tmp_path / "run"
    line, ended_in, code = _run_until_fault(
        out, two_nodes.address, lambda run_dir: os.kill(_pid_of(run_dir, 1), sig)
    )
    assert code == 1
    assert all(fragment in line for fragment in says), line
    assert f"(pid {_pid_of(out, 1)} on node " in line
    assert bounds[0] <= ended_in < bounds[1], f"{ended_in:.1f} s"
    _resumes_to_the_uninterrupted_run(out, two_nodes.address, line, uninterrupted)


def _policy_rank_processes() -> list[int]:
    """Pids of live processes whose title names a policy rank actor (``ray::PolicyRank...``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"PolicyRank" in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.timeout(600)
def test_a_killed_driver_leaves_no_worker_or_placement_behind(
    two_nodes: TwoNodes, tmp_path: Path
) -> None:
    two_nodes.ensure_two()
    out = tmp_path / "run"
    driver: dict[str, int] = {}
    proc = _start_until_step_2(out, two_nodes.address, *RUN)
    driver["ranks"] = len(_policy_rank_processes())
    assert driver["ranks"] == 2
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 60
    while _policy_rank_processes() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _policy_rank_processes() == []
    # No placement group of the run is left holding the cluster's CPUs.
    query = (
        f"import json, ray; ray.init(address={two_nodes.address!r}, log_to_driver=False); "
        "print(json.dumps([g['state'] for g in ray.util.placement_group_table().values() "
        "if g['name'].startswith('mcore-grpo')]))"
    )
    states = (
        subprocess.run(
            [sys.executable, "-c", query], capture_output=True, text=True, timeout=120, check=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert set(json.loads(states)) <= {"REMOVED"}
