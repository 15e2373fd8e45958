"""The regression gate's "before" outcomes, kept between verify runs.

Why: the gate's "before" tree is the pin, or the pin plus the series up to `baseline`; it changes
only when the pins, the patches, the environment or our CPU compatibility plugins do. Its run is
half of every gate (Megatron-LM and Megatron-Bridge: ~1,500 tests each), and reading it back
is what keeps a warm `verify` of the whole stack near its time target.

Everything the outcomes depend on goes into the key, so nothing is reused across a change:
- every upstream's pin and series bytes (a state imports every upstream's tree: Bridge's tests
  run on the patched megatron-core), and which upstreams this run verifies (the others are
  imported from their checkouts);
- the suite's layout, pytest arguments, test directories and nodes;
- the interpreter (path and version) and its installed distributions (dist-info names carry
  the versions);
- the sources of the plugins the runs load (`mcore_grpo.upstream_cpu` and the suite's `-p`
  modules) and of every `mcore_grpo` module they import, and how verify runs a state.
A run with a timed-out test is never kept (a slow moment would otherwise read as "failing
before" until the key changed). `verify --fresh-gate` ignores the cache and refills it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
from dataclasses import asdict
from pathlib import Path

from ..core.checkout import series_digest
from ..core.manifest import load_manifest
from ..core.series import load_series
from .pytest_run import UPSTREAM_CPU_PLUGIN, Outcomes, upstream_pytest_args
from .upstream_proof import SuitePlan

CACHE_DIR = Path(".cache") / "patchtool" / "gate-before"
FORMAT = 1  # bump when what a cache file holds changes
INTEGRATION = Path("integration")  # where the `mcore_grpo` plugins live
# How verify runs a state: a change here may change outcomes.
RUNNER_SOURCES = ("pytest_run.py", "states.py", "trees.py", "forkserver.py")
_TIMEOUT_MARKS = ("Timeout >", "timed out")


def _interpreter(python: Path) -> tuple[str, list[Path]]:
    code = "import json, site, sys; print(json.dumps([sys.version, site.getsitepackages()]))"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    version, sites = json.loads(out.stdout)
    return version, [Path(p) for p in sites]


def _module_file(root: Path, name: str) -> Path | None:
    base = root / INTEGRATION / Path(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def plugin_sources(root: Path, plugins: list[str]) -> list[Path]:
    """The files of `plugins` and of every `mcore_grpo` module they import, transitively, with
    the packages' `__init__.py` on the way (all run when a plugin loads)."""
    seen: dict[str, Path] = {}
    todo = list(plugins)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for k in range(1, len(parts) + 1):
            prefix = ".".join(parts[:k])
            if prefix in seen or not prefix.startswith("mcore_grpo"):
                continue
            path = _module_file(root, prefix)
            if path is None:
                continue
            seen[prefix] = path
            todo += [m for m in _imports(path) if m.startswith("mcore_grpo")]
    return sorted(set(seen.values()))


def _plugins(plan: SuitePlan) -> list[str]:
    args = list(plan.suite.args)
    named = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "-p"]
    return [UPSTREAM_CPU_PLUGIN, *named]


def environment_fingerprint(root: Path, python: Path) -> str:
    """The interpreter, its installed distributions and how verify runs a state, as one digest."""
    version, sites = _interpreter(python)
    digest = hashlib.sha256(f"{FORMAT}\n{python}\n{version}\n".encode())
    for site in sites:
        names = sorted(p.name for p in site.glob("*.dist-info")) if site.is_dir() else []
        digest.update("\n".join(names).encode())
    here = Path(__file__).parent
    for name in RUNNER_SOURCES:
        digest.update((here / name).read_bytes())
    return digest.hexdigest()


def stack_fingerprint(root: Path, verified: list[str]) -> str:
    """Every upstream's pin and series bytes, and which upstreams this run verifies."""
    digest = hashlib.sha256(json.dumps(sorted(verified)).encode())
    for name, up in sorted(load_manifest(root).upstreams.items()):
        series_dir = root / up.series_dir
        digest.update(
            f"{name}\n{series_digest(up, series_dir, load_series(series_dir))}\n".encode()
        )
    return digest.hexdigest()


def cache_key(root: Path, plan: SuitePlan, stack: str, environment: str) -> str:
    """The key of `plan`'s before-tree run (`plan.before` must be set)."""
    assert plan.before is not None
    plugins = {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in plugin_sources(root, _plugins(plan))
    }
    parts = {
        "upstream": plan.suite.upstream,
        "baseline_index": plan.baseline_index,
        "stack": stack,
        "suite": asdict(plan.suite),
        "args": upstream_pytest_args(plan.suite),
        "dirs": plan.before.dirs,
        "nodes": plan.before.nodes,
        "environment": environment,
        "plugins": plugins,
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


def keepable(outcomes: Outcomes) -> bool:
    """A run worth keeping: valid, not empty, and without a timed-out test."""
    if outcomes.invalid or not outcomes.by_node:
        return False
    return not any(m in detail for _, detail in outcomes.by_node.values() for m in _TIMEOUT_MARKS)


def store(root: Path, upstream: str, key: str, outcomes: Outcomes) -> bool:
    """Keep a run that proves something; whether it was kept."""
    if not keepable(outcomes):
        return False
    path = _path(root, upstream, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"by_node": outcomes.by_node, "tail": outcomes.tail}, indent=1))
    tmp.replace(path)
    return True
