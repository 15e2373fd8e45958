"""Running verify's states: each one process on its own trees, up to `jobs` at once, forked
by the fork server (forkserver.py) or started as fresh interpreters.

On any interruption (Ctrl-C, SIGTERM, SIGHUP) the server's process group (the server, every
state, every rank) is killed and the scratch trees removed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PatchToolError
from ..interrupts import signals_interrupt
from ..model.series import Patch
from ..model.test_suites import UpstreamSuite
from .baseline import PLUGIN, baseline_env, read_left_out
from .forkclient import ForkServer
from .forkserver import GUARD_EXIT, GUARD_VAR, REPORT_VAR
from .pytest_run import (
    Outcomes,
    kill_children,
    parse_junit,
    pytest_args,
    run_pytest,
    upstream_pytest_args,
)
from .trees import compile_tree, reversed_tree, series_tree, tree_env_var


@dataclass
class VerifyState:
    """One process to run: `nodes` on the whole stack's series trees, less `patch` if set.

    Every state names a tree for every upstream being verified (the series tree of each
    upstream, or for a left-out state its own upstream's tree less the patch), so every
    upstream module it imports comes from a scratch tree of this run, never the checkout.

    With `suite` set the state runs the upstream's own tests instead of ours: from its own
    upstream's tree, under that upstream's pytest configuration (verify/upstream_proof.py);
    `reverse` then names the patches reverse-applied on the series tree (less the paths that
    match `exclude`), and `dirs` test directories whose `test_*.py` files join `nodes`.
    """

    upstream: str
    repo: Path
    nodes: list[str]
    patch: Patch | None = None
    packages: list[str] = field(default_factory=list)
    outcomes: Outcomes = field(default_factory=Outcomes)
    seconds: float = 0.0  # wall
    cpu_s: float = 0.0  # the pytest process's CPU (forked states)
    name: str = ""  # the patch whose tests run (with the series, or without it)
    suite: UpstreamSuite | None = None
    reverse: list[Patch] = field(default_factory=list)
    exclude: tuple[str, ...] = ()
    dirs: list[str] = field(default_factory=list)
    role: str = ""  # what an upstream-suite state is, for progress lines
    cached: bool = False  # `outcomes` were read back (state_cache.py), not run
    # A gate baseline's nodes that passed on the series: collected but not run (baseline.py).
    skip: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        if self.role:
            return f"{self.upstream} {self.role}"
        return f"{self.upstream} {'without' if self.patch else 'with'} {self.name}"

    def tree_name(self, index: str) -> str:
        """The scratch directory of this state's own tree (for a reader of the scratch)."""
        if self.patch is not None:
            return f"without-{self.patch.path.stem}"
        return f"state-{index}"

    @property
    def reversed_patches(self) -> list[Patch]:
        """`reverse` where given (a left-out patch with the later ones that depend on it),
        else the left-out `patch` alone."""
        return self.reverse or ([self.patch] if self.patch is not None else [])

    def run_nodes(self, tree: Path) -> list[str]:
        """`nodes` plus the `test_*.py` files directly in each of `dirs` that `tree` has."""
        files = {
            path.relative_to(tree).as_posix()
            for rel in self.dirs
            for path in (tree / rel).glob("test_*.py")
            if path.is_file()
        }
        return sorted({*self.nodes, *files})


def state_env(
    trees: dict[str, Path],
    packages: dict[str, list[str]],
    forbidden: list[Path],
    report: Path,
) -> dict[str, str]:
    """The environment of one state: its trees on PYTHONPATH (`tree_env` of every upstream)
    and the module-origin guard the fork server's child checks (forkserver.py)."""
    env: dict[str, str] = {}
    paths: list[str] = []
    for name, tree in trees.items():
        env[tree_env_var(name)] = str(tree)
        paths += [str(tree), str(tree / "src")]
    env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [os.environ.get("PYTHONPATH")])])
    guard = {
        "trees": {name: str(tree) for name, tree in trees.items()},
        "packages": {name: packages.get(name, []) for name in trees},
        "forbidden": [str(f) for f in forbidden],
    }
    env[GUARD_VAR] = json.dumps(guard)
    env[REPORT_VAR] = str(report)
    return env


def verify_preload(root: Path) -> list[str]:
    """Third-party modules the fork server imports once for every state
    (`[tool.patchtool.verify] preload` in the project's pyproject.toml; none without)."""
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return []
    config = tomllib.loads(pyproject.read_text())
    names = config.get("tool", {}).get("patchtool", {}).get("verify", {}).get("preload", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise PatchToolError(
            f"{pyproject}: [tool.patchtool.verify] preload must be a list of module names"
        )
    return names


class _Runner:
    """Runs states: through the fork server (default) or as fresh interpreters."""

    def __init__(self, root: Path, python: Path, server: ForkServer | None) -> None:
        self.root, self.python, self.server = root, python, server

    def run(self, state: VerifyState, tree: Path, env: dict[str, str], report: Path) -> None:
        """Run `state`; `tree` is its own upstream's tree (an upstream suite runs from it)."""
        started = time.monotonic()
        cwd, nodes = (tree, state.run_nodes(tree)) if state.suite else (self.root, state.nodes)
        args = upstream_pytest_args(state.suite) if state.suite else []
        if state.skip:
            args += ["-p", PLUGIN]
            env = {**env, **baseline_env(state.skip, report.parent, report.stem, env)}
        if self.server is None:
            state.outcomes = run_pytest(cwd, self.python, nodes, env, args)
        else:
            full = {**env, **self.server.env()}
            state.outcomes, state.cpu_s = self._forked(nodes, full, cwd, args)
        if state.skip:
            read_left_out(state.outcomes, env)
        state.seconds = time.monotonic() - started
        if report.exists() and report.read_text().strip():
            state.outcomes.invalid = (
                "its processes imported upstream code from outside the state's trees: "
                + report.read_text().strip().replace("\n", "; ")[:600]
            )

    def _forked(
        self, nodes: list[str], env: dict[str, str], cwd: Path, extra: list[str]
    ) -> tuple[Outcomes, float]:
        """One pytest run forked by the server: its outcomes and CPU seconds (its own, not
        those of the ranks it had the server fork)."""
        assert self.server is not None
        with tempfile.TemporaryDirectory(prefix="patchtool-verify-") as tmp:
            junit = Path(tmp) / "junit.xml"
            argv = ["-m", "pytest", *extra, *pytest_args(junit, nodes)]
            # Bytecode is written (into the scratch trees, mostly): the states sharing a tree
            # compile its modules once. A left-out tree starts from the series' bytecode
            # (compile_tree, reversed_tree); what it changed fails the source check.
            full_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            proc = self.server.spawn(argv, {**full_env, **env}, cwd)
            stdout, stderr = proc.communicate()
            tail = " | ".join(stdout.strip().splitlines()[-3:])
            if proc.returncode == GUARD_EXIT:
                return Outcomes({}, tail, invalid=stderr.strip().splitlines()[-1][:600]), proc.cpu_s
            if not junit.exists():
                return Outcomes({}, tail or stderr.strip()[-300:]), proc.cpu_s
            return Outcomes(parse_junit(junit.read_text()), tail), proc.cpu_s


def run_states(
    root: Path,
    python: Path,
    states: list[VerifyState],
    jobs: int,
    progress: bool,
    fork_server: bool = True,
) -> None:
    """Run every state, up to `jobs` at once, each in its own process on its own trees."""
    if not states:
        return
    with StateRunner(root, python, states, jobs, progress, fork_server) as runner:
        runner.run(states)


# Called as a state ends, in its pool slot: the states that may run now (a gate's baseline).
Follow = Callable[[VerifyState], list[VerifyState]]


class StateRunner:
    """One scratch directory, one series tree per upstream and one fork server for several
    rounds of states (verify's suite round, then the gates' baselines and attributions, which
    depend on what the first round found). Interruptions kill every state and remove the trees.

    `upstreams`: states naming every upstream (repo and import roots) the rounds will use.
    """

    def __init__(
        self,
        root: Path,
        python: Path,
        upstreams: list[VerifyState],
        jobs: int,
        progress: bool,
        fork_server: bool = True,
    ) -> None:
        self.root, self.python, self.progress = root, python, progress
        self.repos = {s.upstream: s.repo for s in upstreams}
        self.packages = {s.upstream: s.packages for s in upstreams}
        self.jobs, self.fork_server = max(1, jobs), fork_server
        self._stack = ExitStack()
        self.server: ForkServer | None = None
        self.trees: dict[str, Path] = {}
        self.rounds = 0

    def __enter__(self) -> StateRunner:
        self._stack.enter_context(signals_interrupt())
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            self._abort()
        self._stack.close()

    def _start(self) -> None:
        """The scratch directory, the series trees and the server: at the first round that
        runs anything (a warm verify reads every state back and starts nothing)."""
        self.scratch = Path(
            self._stack.enter_context(tempfile.TemporaryDirectory(prefix="patchtool-verify-"))
        )
        self.forbidden = [*self.repos.values(), self.scratch]
        self.pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="verify")
        self._stack.callback(self.pool.shutdown, wait=True, cancel_futures=True)
        say(
            self.progress, f"scratch trees of {', '.join(self.repos)} (the checkouts are only read)"
        )
        made = {
            name: self.pool.submit(
                _compiled_series_tree, self.python, repo, self.scratch / name / "series"
            )
            for name, repo in self.repos.items()
        }
        if self.fork_server:
            self.server = _start_server(
                self.root, self.python, self.scratch, self.forbidden, self.packages, self.progress
            )
            self._stack.callback(self.server.close)
        self.trees = {name: future.result() for name, future in made.items()}

    def _abort(self) -> None:
        if self.server is not None:
            self.server.kill()
        kill_children()
        self._stack.close()

    def run(self, states: list[VerifyState], follow: Follow | None = None) -> None:
        """Run one round of states, up to `jobs` at once; returns when all have ended.
        `follow(state)`, called as each state ends, names states to run next in its slot."""
        if not states:
            return
        if not self.rounds:
            self._start()
        self.rounds += 1
        runner = _Runner(self.root, self.python, self.server)
        say(self.progress, f"running {len(states)} states, {self.jobs} at a time")
        futures = [
            self.pool.submit(self._one, runner, f"{self.rounds}-{i}", s, follow)
            for i, s in enumerate(states)
        ]
        try:
            for future in futures:
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise

    def _one(self, runner: _Runner, index: str, state: VerifyState, follow: Follow | None) -> None:
        own = dict(self.trees)
        if state.reversed_patches:
            dest = self.scratch / state.upstream / state.tree_name(index)
            own[state.upstream] = reversed_tree(
                self.trees[state.upstream], state.reversed_patches, dest, state.exclude
            )
        report = self.scratch / "reports" / f"{index}.txt"
        report.parent.mkdir(exist_ok=True)
        env = state_env(own, self.packages, self.forbidden, report)
        runner.run(state, own[state.upstream], env, report)
        say(self.progress, f"{state.label}: {state.seconds:.1f} s wall, {state.cpu_s:.1f} s CPU")
        for k, then in enumerate(follow(state) if follow else []):
            self._one(runner, f"{index}-{k}", then, None)


def _compiled_series_tree(python: Path, repo: Path, dest: Path) -> Path:
    return compile_tree(python, series_tree(repo, dest))


def _socket_path(scratch: Path) -> Path:
    """The server's socket: in the scratch directory unless that path is too long for a Unix
    socket (108 bytes), then in a private directory under /tmp (removed with the server)."""
    path = scratch / "forkserver.sock"
    if len(os.fsencode(path)) < 100:
        return path
    return Path(tempfile.mkdtemp(prefix="ptv-", dir="/tmp")) / "s"


def _start_server(
    root: Path,
    python: Path,
    scratch: Path,
    forbidden: list[Path],
    packages: dict[str, list[str]],
    progress: bool,
) -> ForkServer:
    names = verify_preload(root)
    project = [root / p.name for p in root.iterdir() if p.name not in (".venv", ".git")]
    roots = [*forbidden, *project]
    all_packages = sorted({p for names_ in packages.values() for p in names_})
    server = ForkServer(python, _socket_path(scratch), names, roots, all_packages)
    ready = server.ready
    say(
        progress,
        f"fork server: {ready['ready']['preloaded']} modules preloaded "
        f"({ready['ready']['cpu_s']} s CPU, once for every state)",
    )
    for note in ready.get("notes", []):
        say(progress, f"fork server: not preloaded: {note}")
    return server


def say(progress: bool, text: str) -> None:
    if progress:
        print(f"[verify] {text}", file=sys.stderr, flush=True)
