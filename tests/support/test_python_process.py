"""`python_c` children in a plain pytest run: forked from this run's warm server, each a
process of its own with this process's environment, the upstream imports already done."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.support.python_process import python_c, run_ranks

PROBE = """
import json, os, sys
print(json.dumps([os.getpid(), os.environ.get("PROBE"), sys.argv[1:], "megatron.core" in sys.modules]))
"""


def test_a_child_is_a_warm_process_of_its_own_with_the_callers_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PATCHTOOL_FORKSERVER", raising=False)  # not verify's server
    python_c("pass").communicate(timeout=600)  # the server is up before the variable is set
    monkeypatch.setenv("PROBE", "set after the server started")
    children = [python_c(PROBE, str(n)) for n in range(2)]
    seen = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err[-2000:]
        seen.append(json.loads(out))
    pids = {pid for pid, _, _, _ in seen}
    assert len(pids) == 2 and os.getpid() not in pids
    assert [(probe, argv, warm) for _, probe, argv, warm in seen] == [
        ("set after the server started", ["0"], True),
        ("set after the server started", ["1"], True),
    ]


# Rank 1 raises; rank 0 then waits in a collective for a peer that is gone.
ONE_RANK_RAISES = """
import os, sys
import torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=int(sys.argv[2]), world_size=2)
if sys.argv[2] == "1":
    raise ValueError("rank one's own error")
dist.barrier()
"""


def test_run_ranks_names_the_failed_rank_with_its_traceback_without_waiting_for_the_other() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError) as failure:
        run_ranks(ONE_RANK_RAISES, 2)
    message = str(failure.value)
    assert "rank 1 exited with 1:" in message and "ValueError: rank one's own error" in message
    assert "rank 0 " in message  # its barrier failed, or it was killed after the grace
    assert time.monotonic() - started < 120  # not gloo's 30-minute collective timeout


def test_run_ranks_kills_a_rank_still_running_once_another_failed() -> None:
    script = "import sys, time\nif sys.argv[2] == '1':\n    sys.exit(3)\ntime.sleep(600)\n"
    started = time.monotonic()
    with pytest.raises(AssertionError) as failure:
        run_ranks(script, 2)
    assert "rank 1 exited with 3:" in str(failure.value)
    assert "rank 0 was killed (still running after a peer failed)" in str(failure.value)
    assert time.monotonic() - started < 120


def test_inside_a_state_with_its_own_trees_a_child_is_a_fresh_interpreter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`verify --no-fork-server` and `rebase --tripwires` point a state at its trees through
    PYTHONPATH and `PATCHTOOL_TREE_*`; megatron-core preloaded from the checkout would be the
    wrong tree, so the child imports everything itself."""
    monkeypatch.delenv("PATCHTOOL_FORKSERVER", raising=False)
    monkeypatch.setenv("PATCHTOOL_TREE_MEGATRON_LM", "/a/state/tree")
    child = python_c(PROBE, "0")
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err[-2000:]
    assert json.loads(out)[3] is False  # megatron.core not imported before the script


def test_run_ranks_kills_and_names_ranks_still_running_at_the_timeout() -> None:
    with pytest.raises(AssertionError, match=r"rank 0 was killed \(still running at the 2 s"):
        run_ranks("import time\ntime.sleep(600)\n", 1, timeout=2)
