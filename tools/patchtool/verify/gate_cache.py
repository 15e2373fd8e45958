"""The regression gate's "before" outcomes, kept between verify runs.

Why: the gate's "before" tree is the pin, or the pin plus the series up to `baseline`; it changes
only when the pin, those patches, the environment or the CPU compatibility plugins do. Its run is
half of every gate (Megatron-LM and Megatron-Bridge: ~1,500 tests each), and reading it back
is what keeps a warm `verify` of the whole stack near its time target. Everything the outcomes
depend on goes into the key, so nothing is reused across a change: the pin, each kept patch's
bytes, the suite's layout and pytest arguments, the test directories, the interpreter and the
installed distributions (their dist-info names carry the versions), and the plugin sources.
`verify --fresh-gate` ignores the cache (and refills it).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import asdict
from pathlib import Path

from .pytest_run import Outcomes, upstream_pytest_args
from .upstream_proof import SuitePlan

CACHE_DIR = Path(".cache") / "patchtool" / "gate-before"
# The project's code that shapes upstream outcomes: the CPU plugins and what they import.
PLUGIN_SOURCES = ("integration/mcore_grpo/upstream_*.py", "integration/mcore_grpo/worker/cpu.py")


def _site_packages(python: Path) -> list[Path]:
    code = "import json, site; print(json.dumps(site.getsitepackages()))"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return [Path(p) for p in json.loads(out.stdout)]


def environment_fingerprint(root: Path, python: Path) -> str:
    """The interpreter, its installed distributions and the plugin sources, as one digest."""
    digest = hashlib.sha256(str(python).encode())
    for site in _site_packages(python):
        names = sorted(p.name for p in site.glob("*.dist-info")) if site.is_dir() else []
        digest.update("\n".join(names).encode())
    for pattern in PLUGIN_SOURCES:
        for path in sorted(root.glob(pattern)):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key(plan: SuitePlan, pin: str, environment: str) -> str:
    """The key of `plan`'s before-tree run (`plan.before` must be set)."""
    assert plan.before is not None
    kept = plan.series[: plan.baseline_index]
    parts = {
        "upstream": plan.suite.upstream,
        "pin": pin,
        "kept": [hashlib.sha256(p.path.read_bytes()).hexdigest() for p in kept],
        "suite": asdict(plan.suite),
        "args": upstream_pytest_args(plan.suite),
        "dirs": plan.before.dirs,
        "nodes": plan.before.nodes,
        "environment": environment,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _path(root: Path, upstream: str, key: str) -> Path:
    return root / CACHE_DIR / f"{upstream}-{key}.json"


def load(root: Path, upstream: str, key: str) -> Outcomes | None:
    """The cached outcomes for `key`, or None (absent or unreadable: run it)."""
    path = _path(root, upstream, key)
    try:
        data = json.loads(path.read_text())
        by_node = {node: (str(o), str(d)) for node, (o, d) in data["by_node"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Outcomes(by_node, tail=str(data.get("tail", "")))


def store(root: Path, upstream: str, key: str, outcomes: Outcomes) -> None:
    """Keep a run that proves something (never an invalid or empty one)."""
    if outcomes.invalid or not outcomes.by_node:
        return
    path = _path(root, upstream, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"by_node": outcomes.by_node, "tail": outcomes.tail}, indent=1))
    tmp.replace(path)
