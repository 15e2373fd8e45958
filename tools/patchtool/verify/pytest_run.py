"""One pytest run of a verify state and what it says per `Test:` node (junit outcomes).

Why its own module: both ways a state runs (a fresh interpreter here, a forked child in
states.py) read the same junit XML and kill the same way when verify is interrupted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import xml.etree.ElementTree as ET
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PatchToolError
from ..model.test_suites import UpstreamSuite

PASSED, FAILED, SKIPPED, NOT_RUN = "passed", "failed", "skipped", "not-run"
INVALID = "invalid"  # the state did not run on exactly its trees: it proves nothing


@dataclass
class Outcomes:
    """Per-node outcomes of one pytest run, plus the output tail for failures to explain."""

    by_node: dict[str, tuple[str, str]] = field(default_factory=dict)
    tail: str = ""
    invalid: str = ""  # why the run proves nothing (the module-origin guard tripped)

    def of(self, node: str) -> tuple[str, str]:
        """Outcome of a `Test:` node; a file or a test name covers its parametrisations."""
        if self.invalid:
            return INVALID, self.invalid
        hits = [v for k, v in self.by_node.items() if _covers(node, k)]
        if not hits:
            return FAILED, f"{node} did not run (collection error?): {self.tail}"
        for outcome in (FAILED, SKIPPED):
            for value, detail in hits:
                if value == outcome:
                    return value, detail
        return PASSED, ""


def _covers(node: str, case: str) -> bool:
    return case == node or case.startswith(node + "[") or case.startswith(node + "::")


def venv_python(root: Path) -> Path:
    python = root / ".venv" / "bin" / "python"
    if not python.exists():
        raise PatchToolError(
            f"{python} does not exist: verify runs the tests in the project venv; run `uv sync` "
            "first (or pass --python)"
        )
    return python


def _node_of(case: ET.Element) -> str:
    file = case.get("file", "")
    classname = case.get("classname", "")
    module = file[:-3].replace("/", ".") if file.endswith(".py") else ""
    classes = classname[len(module) + 1 :] if module and classname.startswith(module + ".") else ""
    parts = [file, *(classes.split(".") if classes else []), case.get("name", "")]
    return "::".join(parts)


def parse_junit(xml_text: str) -> dict[str, tuple[str, str]]:
    """node id -> (outcome, message) from pytest's xunit1 junit XML."""
    result: dict[str, tuple[str, str]] = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        outcome, detail = PASSED, ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, detail = FAILED, (child.get("message") or "").splitlines()[0:1]
                detail = detail[0] if detail else child.tag
                break
            if child.tag == "skipped":
                outcome, detail = SKIPPED, child.get("message") or "skipped"
        result[_node_of(case)] = (outcome, str(detail)[:200])
    return result


_LIVE: set[subprocess.Popen[str]] = set()


_LIVE_LOCK = threading.Lock()


def kill_children() -> None:
    """Kill every pytest process group still running (an interrupted verify leaves none)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for proc in live:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def run_killable(
    cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[str, str]:
    """Run `cmd` to its end in a session of its own, which `kill_children()` ends (and
    whatever it started) when verify is interrupted; its (stdout, stderr)."""
    with subprocess.Popen(
        cmd,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    ) as proc:
        with _LIVE_LOCK:
            _LIVE.add(proc)
        try:
            return proc.communicate()
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(proc)


def run_pytest(
    root: Path,
    python: Path,
    nodes: list[str],
    env: dict[str, str] | None = None,
    extra: list[str] | None = None,
) -> Outcomes:
    """One pytest process over `nodes` (extra `env` on top of ours), run in `root` (this
    repository, or an upstream tree for its own tests, with `extra` arguments); outcomes per
    test node.

    The process runs in a session of its own so that `kill_children()` can end it (and whatever
    it started) when verify is interrupted.
    """
    with tempfile.TemporaryDirectory(prefix="patchtool-verify-") as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [str(python), "-m", "pytest", *(extra or []), *pytest_args(junit, nodes)]
        full_env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **(env or {}))
        stdout, stderr = run_killable(cmd, cwd=root, env=full_env)
        tail = " | ".join(stdout.strip().splitlines()[-3:])
        if not junit.exists():
            return Outcomes({}, tail or stderr.strip()[-300:])
        return Outcomes(parse_junit(junit.read_text()), tail)


def pytest_args(junit: Path, nodes: list[str]) -> list[str]:
    """pytest's arguments for one state: its nodes, junit outcomes, no cache written."""
    # --tb=short: a left-out state fails by design, often in 100+ cases; pytest's long
    # tracebacks (source of every frame) cost seconds there and verify shows one line.
    # no:randomly: the states are compared node by node, in the order the upstream wrote them.
    args = ["-q", "--tb=short", "-p", "no:cacheprovider", "-p", "no:randomly"]
    args += ["-o", "junit_family=xunit1"]
    return [*args, f"--junitxml={junit}", *sorted(set(nodes))]


# The CPU compatibility layer for the upstreams' own tests (integration/upstream_pytest/cpu.py):
# nccl -> gloo and CUDA devices -> CPU where CUDA is absent; failures caused only by missing
# hardware or packages are reported as skips that say so.
UPSTREAM_CPU_PLUGIN = "upstream_pytest.cpu"


def upstream_pytest_args(suite: UpstreamSuite) -> list[str]:
    """Arguments on top of the upstream's own pytest configuration (its addopts stay).

    `--maxfail` undoes an `-x` in the upstream's addopts (NeMo-RL's) and
    `--continue-on-collection-errors` pytest's stop at a file that does not import here: the
    gate must see every test (an uncollectable file counts as one failing node). The timeout
    turns a test that hangs on CPU into one failure. The suite's own `args`
    (patches/upstream-tests.toml) come last.
    """
    return [
        "-p",
        UPSTREAM_CPU_PLUGIN,
        f"--timeout={suite.timeout}",
        "--maxfail=1000000",
        "--continue-on-collection-errors",
        "-W",
        "ignore",
        *suite.args,
    ]
