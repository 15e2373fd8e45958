"""`python_c` children in a plain pytest run: forked from this run's warm server, each a
process of its own with this process's environment, the upstream imports already done."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.python_process import python_c

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
