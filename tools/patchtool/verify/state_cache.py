"""Every verify state's outcomes, kept between runs and read back while nothing they depend on
changed.

Why: a state is one pytest process on scratch trees made from the checkouts; its outcomes are a
function of those trees, the tests it runs, the interpreter with its installed distributions
and how verify runs it. A warm `verify` (nothing changed since the last one) reads every state
back instead of running ~130 processes again (the gate's "before" run alone is ~1,500 tests
per upstream); a change re-runs exactly the states whose key it touches.

Everything a state's outcomes depend on goes into its key, so nothing is reused across a change:
- the content of every upstream tree the state imports: each checkout's HEAD tree id (the series
  applied on the pin; verify refuses a checkout that is not that clean state), the series bytes
  of every upstream, and which upstreams this run verifies (the others are imported from their
  checkouts, so a dirty one turns the cache off);
- the state itself: its upstream, nodes, test directories, the patches it reverse-applies,
  the paths it keeps and, for a gate baseline, the tests it leaves out (baseline.py);
- for an upstream suite state: the suite's layout and pytest arguments, and the sources of the
  plugins the run loads (`upstream_pytest.cpu` and the suite's `-p` modules) with every
  module of ours they import (`upstream_pytest`, `mcore_grpo`);
- for one of our tripwire states: every file under `tests/` and `integration/` and
  `pyproject.toml` (our tests import both, and pytest reads its configuration there);
- the interpreter (path and version) and its installed distributions (dist-info names carry
  the versions), and verify's own runner sources.
A run with a timed-out test, an empty run and an invalid one (the module-origin guard tripped)
are never kept: a slow moment would otherwise read as a failure until the key changed.
`verify --fresh` ignores the cache and refills it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from ..git.git import git_text
from ..model.manifest import load_manifest
from ..model.series import load_series
from ..model.test_suites import UpstreamSuite
from ..source.checkout import checkout_dir, dirty_files, is_repo, series_digest
from .pytest_run import UPSTREAM_CPU_PLUGIN, Outcomes, upstream_pytest_args
from .states import VerifyState

CACHE_DIR = Path(".cache") / "patchtool" / "states"
FORMAT = 2  # bump when what a cache file holds changes
INTEGRATION = Path("integration")  # where the plugins (`upstream_pytest`) and `mcore_grpo` live
# The top-level packages under INTEGRATION a plugin may import: their modules key a state too.
OUR_PACKAGES = ("upstream_pytest", "mcore_grpo")
PROJECT_DIRS = ("tests", "integration")  # what our tripwire states import from this repository
# How verify runs a state: a change here may change outcomes.
RUNNER_SOURCES = (
    "pytest_run.py",
    "states.py",
    "trees.py",
    "forkserver.py",
    "baseline.py",
    "pytest_plugins/patchtool_baseline.py",
)
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
    """The files of `plugins` and of every module of OUR_PACKAGES they import, transitively, with
    the packages' `__init__.py` on the way (all run when a plugin loads)."""
    seen: dict[str, Path] = {}
    todo = list(plugins)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for k in range(1, len(parts) + 1):
            prefix = ".".join(parts[:k])
            if prefix in seen or parts[0] not in OUR_PACKAGES:
                continue
            path = _module_file(root, prefix)
            if path is None:
                continue
            seen[prefix] = path
            todo += [m for m in _imports(path) if m.split(".")[0] in OUR_PACKAGES]
    return sorted(set(seen.values()))


def _plugins(suite: UpstreamSuite) -> list[str]:
    args = list(suite.args)
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


def stack_fingerprint(root: Path, verified: list[str]) -> str | None:
    """Every upstream's pin, series bytes and checkout HEAD tree, and which upstreams this run
    verifies; None when a checkout another state imports from is dirty (its files are not the
    tree its HEAD names, so nothing keyed on it can be reused)."""
    digest = hashlib.sha256(json.dumps(sorted(verified)).encode())
    for name, up in sorted(load_manifest(root).upstreams.items()):
        series_dir = root / up.series_dir
        digest.update(
            f"{name}\n{series_digest(up, series_dir, load_series(series_dir))}\n".encode()
        )
        repo = checkout_dir(root, up)
        if not is_repo(repo):
            digest.update(b"absent\n")
            continue
        if name not in verified and dirty_files(repo):
            return None
        digest.update(f"{git_text(['rev-parse', 'HEAD^{tree}'], repo, check=False)}\n".encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class KeyInputs:
    """What every state's key shares, computed once per verify run."""

    stack: str
    environment: str
    project: str
    plugins: dict[str, dict[str, str]]  # upstream -> its suite's plugin sources, by digest


def key_inputs(
    root: Path, python: Path, verified: list[str], suites: list[UpstreamSuite]
) -> KeyInputs | None:
    """The shared inputs of this run's keys; None when nothing may be cached (a dirty
    checkout that is not verified)."""
    stack = stack_fingerprint(root, verified)
    if stack is None:
        return None
    plugins = {suite.upstream: _plugins_digest(root, suite) for suite in suites}
    return KeyInputs(
        stack, environment_fingerprint(root, python), project_fingerprint(root), plugins
    )


def project_fingerprint(root: Path) -> str:
    """Our tests, the integration package and pytest's configuration, by content (tracked or
    not): what a tripwire state imports from this repository."""
    digest = hashlib.sha256()
    files = [root / "pyproject.toml"]
    for top in PROJECT_DIRS:
        files += [
            p for p in (root / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts
        ]
    for path in sorted(files):
        if path.is_file():
            digest.update(f"{path.relative_to(root).as_posix()}\n".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _plugins_digest(root: Path, suite: UpstreamSuite) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in plugin_sources(root, _plugins(suite))
    }


def state_key(state: VerifyState, inputs: KeyInputs) -> str:
    """The key of one state's outcomes (see the module docstring for what goes in)."""
    parts: dict[str, object] = {
        "upstream": state.upstream,
        "nodes": state.nodes,
        "dirs": state.dirs,
        "reverse": [p.path.name for p in state.reversed_patches],
        "exclude": list(state.exclude),
        "skip": hashlib.sha256("\n".join(sorted(state.skip)).encode()).hexdigest(),
        "stack": inputs.stack,
        "environment": inputs.environment,
    }
    if state.suite is not None:
        parts["suite"] = asdict(state.suite)
        parts["args"] = upstream_pytest_args(state.suite)
        parts["plugins"] = inputs.plugins[state.suite.upstream]
    else:
        parts["project"] = inputs.project
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


def read_back(root: Path, state: VerifyState, inputs: KeyInputs) -> bool:
    """Give `state` its cached outcomes if the cache holds them; whether it did."""
    outcomes = load(root, state.upstream, state_key(state, inputs))
    if outcomes is not None:
        state.outcomes, state.cached = outcomes, True
    return state.cached


def keep_ran(root: Path, states: list[VerifyState], inputs: KeyInputs) -> list[str]:
    """Keep each of `states` that ran (was not read back) for the next verify; the labels of
    those not worth keeping (store)."""
    return [
        state.label
        for state in states
        if not state.cached
        and not store(root, state.upstream, state_key(state, inputs), state.outcomes)
    ]
