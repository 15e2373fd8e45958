"""The abort line of a failed call: which rank's fault is the cause, and what it says.

The faults themselves (a node lost, a process killed, a process stopped) run on a real
two-node Ray cluster in `test_multinode.py`; these check the choice and wording cheaply."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcore_grpo.cli import aborted_message
from mcore_grpo.config.loader import load_config
from mcore_grpo.config.schema import ConfigError
from mcore_grpo.grpo.cluster.fault import (
    Cause,
    RankFault,
    describe,
    is_collective_error,
    repeating_error,
    repeating_fault,
)
from mcore_grpo.grpo.cluster.placement import PlacementError, WorkerPlace, ranks_per_node
from mcore_grpo.grpo.ranks.runner import WorkerFailed

GLOO_CLOSED = (
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
    "Connection closed by peer [192.0.2.2]:41234"
)
PLACES = [WorkerPlace(r, f"{r}a2b3c4d5e6f", "192.0.2.2", 4200 + r) for r in range(2)]


def _line(faults: list[RankFault]) -> str:
    ordered = sorted(faults, key=lambda f: (f.cause, f.place.rank))
    return describe(ordered, "train", collective_timeout_s=10, fault_wait_s=20)


def test_a_peer_failing_in_a_collective_is_a_consequence_not_the_cause() -> None:
    assert is_collective_error(GLOO_CLOSED)
    assert not is_collective_error("ValueError: bad batch")
    line = _line(
        [
            RankFault(PLACES[0], Cause.COLLECTIVE, GLOO_CLOSED),
            RankFault(PLACES[1], Cause.NODE_LOST, "its node died"),
        ]
    )
    assert line == (
        "worker rank 1 was lost in train (pid 4201 on node 192.0.2.2, id 1a2b3c4d): its node died"
    )


def test_a_silent_rank_names_both_timeouts_and_a_raised_error_its_exception() -> None:
    silent = _line(
        [
            RankFault(PLACES[0], Cause.COLLECTIVE, GLOO_CLOSED),
            RankFault(PLACES[1], Cause.NO_ANSWER, "no answer"),
        ]
    )
    assert silent.startswith("worker rank 1 stopped answering in train (pid 4201")
    assert "10 s after its peers (cluster.collective_timeout_s)" in silent
    assert "20 s more (cluster.fault_wait_s)" in silent
    raised = _line([RankFault(PLACES[0], Cause.RAISED, "Traceback ...\nValueError: bad batch")])
    first, _, rest = raised.partition("\n")
    assert first.endswith(
        "failed in train (pid 4200 on node 192.0.2.2, id 0a2b3c4d): ValueError: bad batch"
    )
    assert rest.startswith("Traceback")


def test_the_abort_line_names_the_last_checkpoint_and_the_resume_command(tmp_path: Path) -> None:
    err = WorkerFailed("worker rank 1 died in train (pid 7): its worker process exited")
    argv = ["--workers", "2", "--output-dir", str(tmp_path), "cluster.num_nodes=2"]
    assert aborted_message(err, tmp_path, 3, argv) == (
        "mcore-grpo: run aborted at step 3: worker rank 1 died in train (pid 7): its worker "
        "process exited; no checkpoint was saved yet; run again with: mcore-grpo " + " ".join(argv)
    )
    root = tmp_path / "checkpoints"
    (root / "step_000002").mkdir(parents=True)
    (root / "latest").write_text("step_000002")
    line = aborted_message(err, tmp_path, 3, [*argv, "--resume"])
    assert line.endswith(
        f"; last checkpoint: step 2 ({root / 'step_000002'}); resume with: mcore-grpo "
        + " ".join(argv)
        + " --resume"
    )


def test_a_start_up_failure_a_rerun_repeats_says_so_and_how_to_end_it(tmp_path: Path) -> None:
    """An import the installed tree lacks fails every start: never "run again"."""
    missing = ImportError("cannot import name 'GatedDeltaNet2' from 'megatron.core.ssm'")
    assert repeating_error(missing) == "ImportError"
    assert repeating_error(RuntimeError("gloo: connection reset")) is None
    ray_text = (
        "The actor died because of an error raised in its creation task, "
        'ray::PolicyRank.__init__()\n  File "forward.py", line 46\n'
        "ModuleNotFoundError: No module named 'megatron.core.ssm'"
    )
    raised = [RankFault(PLACES[0], Cause.RAISED, ray_text)]
    assert repeating_fault(raised) == "ModuleNotFoundError"
    assert repeating_fault([RankFault(PLACES[0], Cause.NODE_LOST, "its node died")]) is None
    assert repeating_fault([RankFault(PLACES[0], Cause.RAISED, GLOO_CLOSED)]) is None

    err = WorkerFailed(f"worker rank 0 failed to start: {missing!r}", repeats="ImportError")
    line = aborted_message(err, tmp_path, None, [])
    assert "run again" not in line
    assert line.startswith("mcore-grpo: run aborted: worker rank 0 failed to start: ImportError(")
    assert "every start fails with this ImportError" in line
    assert "tools/apply_patches.sh" in line and "docs/environment.md" in line
    err = WorkerFailed("worker rank 0 failed to start: TypeError('x')", repeats="TypeError")
    assert aborted_message(err, tmp_path, None, []).endswith("a rerun repeats it")


def test_bad_cluster_settings_are_refused_naming_the_key() -> None:
    with pytest.raises(
        PlacementError, match=r"--workers 3 does not divide over cluster.num_nodes=2"
    ):
        ranks_per_node(3, 2)
    with pytest.raises(ConfigError, match=r"cluster.collective_timeout_s=0.0: must be"):
        load_config(overrides=["cluster.collective_timeout_s=0"])
    with pytest.raises(ConfigError, match=r"cluster.num_nodes=0: must be >= 1"):
        load_config(overrides=["cluster.num_nodes=0"])
