"""`verify`: the tripwire proof of every patch.

A patch is proven when its `Test:` nodes pass on the tree with the whole series applied and fail
on the same tree with only that patch left out. The user's checkout is never touched: each
state is a scratch tree of its own (the checkout's HEAD via `git archive`, once per upstream;
a left-out state hard-links that tree and reverse-applies its patch on private copies of the
patch's files). A state names a tree for every upstream being verified (the others' series
trees), through `PATCHTOOL_TREE_<UPSTREAM>` and PYTHONPATH, as `rebase --tripwires` does.

Each patch has two states, each one process: its tests with the series, its tests without
the patch. The processes are forked by a server (forkserver.py) that imported the project's
heavy third-party modules once (`[tool.patchtool.verify] preload` in pyproject.toml), which
cuts each process's start from ~15 s of CPU to ~1 s; the tests' own rank processes are forked
by it too (tests/support/python_process.py). Every child checks, when it ends, that each
upstream module it imported came from its state's trees (the module-origin guard); a state
that fails the check is invalid and proves nothing. States run in parallel, up to `jobs` at
once (default: the machine's cores), the longest-looking first. On any interruption (Ctrl-C,
SIGTERM, SIGHUP) the server's process group (the server, every state, every rank) is killed
and the scratch trees removed. `--no-fork-server` runs each state as a fresh interpreter.

On a proxy (the nearest release standing in for a non-release pin) every row says so: the
source column carries the patch's proxy label, a proof is "proven on proxy" (never "proven"),
and a patch that does not apply on the proxy is "not verified here" (like a missing source,
accepted by --allow-missing).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import tomllib
import xml.etree.ElementTree as ET
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from ..core.checkout import checkout_dir, dirty_files
from ..core.git import git, git_bytes
from ..core.manifest import Upstream
from ..core.series import Patch, load_series
from ..core.state import upstream_status
from ..errors import GitError, PatchToolError
from ..interrupts import signals_interrupt
from ..rebase.engine import TripwireHook
from ..source.detect import MISSING, STANDIN, Source, detect_source
from ..source.proxy import check_series, proxy_name
from .forkserver import GUARD_EXIT, GUARD_VAR, REPORT_VAR, ForkServer

PASSED, FAILED, SKIPPED, NOT_RUN = "passed", "failed", "skipped", "not-run"
INVALID = "invalid"  # the state did not run on exactly its trees: it proves nothing
PROVEN, PROVEN_ON_PROXY, NOT_VERIFIED = "proven", "proven on proxy", "not verified here"


@dataclass
class Proof:
    """The verdict for one patch: its tests' outcome with and without the patch."""

    upstream: str
    patch: str
    tests: list[str]
    source: str
    with_patch: str = NOT_RUN
    without_patch: str = NOT_RUN
    verdict: str = NOT_VERIFIED
    detail: str = ""
    proxy: str = ""  # non-empty: ran on this proxy, not on the pinned commit

    @property
    def proven(self) -> bool:
        return self.verdict in (PROVEN, PROVEN_ON_PROXY)

    @property
    def unavailable(self) -> bool:
        """Not verifiable on this machine (source missing, or the patch does not fit the proxy)."""
        return self.source == "missing" or (bool(self.proxy) and self.verdict == NOT_VERIFIED)


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


def source_label(source: Source) -> str:
    """How exact a verification on this source is; never claims more than it is."""
    if source.proxy:
        return f"PROXY ({source.detail})"
    if source.kind == STANDIN:
        return f"stand-in ({source.detail})"
    return f"exact pin ({source.kind})"


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


def run_pytest(
    root: Path, python: Path, nodes: list[str], env: dict[str, str] | None = None
) -> Outcomes:
    """One pytest process over `nodes` (extra `env` on top of ours); outcomes per test node.

    The process runs in a session of its own so that `kill_children()` can end it (and whatever
    it started) when verify is interrupted.
    """
    with tempfile.TemporaryDirectory(prefix="patchtool-verify-") as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [str(python), "-m", "pytest", *_pytest_args(junit, nodes)]
        full_env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **(env or {}))
        with subprocess.Popen(
            cmd,
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=full_env,
            start_new_session=True,
        ) as proc:
            with _LIVE_LOCK:
                _LIVE.add(proc)
            try:
                stdout, stderr = proc.communicate()
            finally:
                with _LIVE_LOCK:
                    _LIVE.discard(proc)
        tail = " | ".join(stdout.strip().splitlines()[-3:])
        if not junit.exists():
            return Outcomes({}, tail or stderr.strip()[-300:])
        return Outcomes(parse_junit(junit.read_text()), tail)


def _pytest_args(junit: Path, nodes: list[str]) -> list[str]:
    """pytest's arguments for one state: its nodes, junit outcomes, no cache written."""
    # --tb=short: a left-out state fails by design, often in 100+ cases; pytest's long
    # tracebacks (source of every frame) cost seconds there and verify shows one line.
    args = ["-q", "--tb=short", "-p", "no:cacheprovider", "-o", "junit_family=xunit1"]
    return [*args, f"--junitxml={junit}", *sorted(set(nodes))]


def series_tree(repo: Path, dest: Path) -> Path:
    """The checkout's HEAD (the patched series) as a plain scratch tree; the checkout is only
    read (`git archive`), never changed."""
    dest.mkdir(parents=True)
    archive = git_bytes(["archive", "--format=tar", "HEAD"], repo)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def left_out_tree(series: Path, patch: Patch, dest: Path) -> Path:
    """`series` with `patch` reverse-applied, in `dest`: every file hard-linked from `series`
    except the patch's own files, which are private copies (the shared tree stays intact)."""
    # Without the series' bytecode: other states are writing it meanwhile (a file that is
    # renamed into place mid-copy would fail the copy), and this tree compiles its own.
    shutil.copytree(
        series,
        dest,
        symlinks=True,
        copy_function=os.link,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    paths = sorted({f.path for f in patch.files} | {f.old_path for f in patch.files if f.old_path})
    for rel in paths:
        target = dest / rel
        if target.is_file() and not target.is_symlink():
            data = target.read_bytes()
            target.unlink()
            target.write_bytes(data)
    data = patch.path.read_bytes()
    env = {"GIT_CEILING_DIRECTORIES": str(dest.parent)}  # a plain tree, not a repository
    try:
        git(["apply", "-R", "--check", "-"], dest, input=data, env=env)
    except GitError as exc:
        raise PatchToolError(
            f"{patch.path.name} does not reverse-apply on the patched tree (a later patch in the "
            "series touches the same lines): it cannot be left out alone; merge the two patches "
            "or make the later one independent"
        ) from exc
    git(["apply", "-R", "-"], dest, input=data, env=env)
    return dest


@dataclass
class _State:
    """One process to run: `nodes` on the whole stack's series trees, less `patch` if set.

    Every state names a tree for every upstream being verified (the series tree of each
    upstream, or for a left-out state its own upstream's tree less the patch), so every
    upstream module it imports comes from a scratch tree of this run, never the checkout.
    """

    upstream: str
    repo: Path
    nodes: list[str]
    patch: Patch | None = None
    packages: list[str] = field(default_factory=list)
    outcomes: Outcomes = field(default_factory=Outcomes)
    seconds: float = 0.0  # wall
    cpu_s: float = 0.0  # the pytest process's CPU (forked states)

    @property
    def label(self) -> str:
        return f"{self.upstream} {'without' if self.patch else 'with'} {self.name}"

    name: str = ""  # the patch whose tests run (with the series, or without it)


@dataclass
class _Plan:
    """What verify will run for one upstream: its proofs and, per proof, its two states."""

    proofs: list[Proof]
    testable: list[tuple[Proof, Patch]]
    states: list[tuple[_State, _State]]  # (with the series, without the patch) per testable


def import_roots(patches: list[Patch], root: Path) -> list[str]:
    """The upstream's import packages the series touches (e.g. `megatron`, `nemo_rl`): the
    top-level name of every Python file a patch changes (`src/` layouts stripped), less names
    this repository itself has at its root (its own `tests`, `tools`)."""
    names: set[str] = set()
    for patch in patches:
        for changed in patch.files:
            for rel in filter(None, (changed.path, changed.old_path)):
                parts = rel.split("/")
                if parts[0] == "src" and len(parts) > 1:
                    parts = parts[1:]
                if parts[-1].endswith(".py"):
                    names.add(parts[0].removesuffix(".py"))
    return sorted(n for n in names if not (root / n).exists() and not (root / f"{n}.py").exists())


def plan_upstream(root: Path, up: Upstream) -> _Plan:
    """The proofs of `up`'s series and the states to run for them (nothing runs yet)."""
    series = load_series(root / up.series_dir)
    source = detect_source(root, up)
    label = source_label(source)
    proofs = [Proof(up.name, p.path.name, p.trailer_values("Test"), label) for _, p in series]
    if source.kind == MISSING:
        for proof in proofs:
            proof.source = "missing"
            proof.detail = (
                f"{source.detail}; provide {up.path} (e.g. a local mirror and "
                f"`git config --global url.<mirror>.insteadOf {up.url}`), then apply"
            )
        return _Plan(proofs, [], [])
    row = upstream_status(root, up)
    repo = checkout_dir(root, up)
    if not row["patched_state"] or dirty_files(repo):
        raise PatchToolError(
            f"{up.path} is not the clean patched state of its series: run "
            f"`tools/patches apply {up.name}` first"
        )
    testable = [(proof, patch) for proof, (_, patch) in zip(proofs, series, strict=True)]
    if source.proxy:
        checks = check_series(repo, source.pin, series)
        for (proof, _), check in zip(testable, checks, strict=True):
            proof.proxy, proof.source = proxy_name(up), f"PROXY {proxy_name(up)}: {check.label}"
            if not check.applies:
                proof.detail = f"{check.label}; the patch is not applied on the proxy"
        testable = [t for t, c in zip(testable, checks, strict=True) if c.applies]
    for proof, _ in testable:
        if not proof.tests:
            proof.verdict, proof.detail = "no tripwire", "the patch has no Test: trailer"
    testable = [(proof, patch) for proof, patch in testable if proof.tests]
    packages = import_roots([patch for _, patch in series], root)
    states = [
        (
            _State(up.name, repo, proof.tests, None, packages, name=patch.path.name),
            _State(up.name, repo, proof.tests, patch, packages, name=patch.path.name),
        )
        for proof, patch in testable
    ]
    return _Plan(proofs, testable, states)


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

    def run(self, state: _State, env: dict[str, str], report: Path) -> None:
        started = time.monotonic()
        if self.server is None:
            state.outcomes = run_pytest(self.root, self.python, state.nodes, env)
        else:
            state.outcomes, state.cpu_s = self._forked(state.nodes, {**env, **self.server.env()})
        state.seconds = time.monotonic() - started
        if report.exists() and report.read_text().strip():
            state.outcomes.invalid = (
                "its processes imported upstream code from outside the state's trees: "
                + report.read_text().strip().replace("\n", "; ")[:600]
            )

    def _forked(self, nodes: list[str], env: dict[str, str]) -> tuple[Outcomes, float]:
        """One pytest run forked by the server: its outcomes and CPU seconds (its own, not
        those of the ranks it had the server fork)."""
        assert self.server is not None
        with tempfile.TemporaryDirectory(prefix="patchtool-verify-") as tmp:
            junit = Path(tmp) / "junit.xml"
            argv = ["-m", "pytest", *_pytest_args(junit, nodes)]
            # Bytecode is written (into the scratch trees, mostly): the states sharing a tree
            # compile its modules once. A left-out tree never takes the series' bytecode
            # (left_out_tree copies no __pycache__).
            full_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            proc = self.server.spawn(argv, {**full_env, **env}, self.root)
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
    states: list[_State],
    jobs: int,
    progress: bool,
    fork_server: bool = True,
) -> None:
    """Run every state, up to `jobs` at once, each in its own process on its own trees."""
    if not states:
        return
    jobs = max(1, jobs)
    with signals_interrupt(), tempfile.TemporaryDirectory(prefix="patchtool-verify-") as tmp:
        scratch = Path(tmp)
        repos = {s.upstream: s.repo for s in states}
        packages = {s.upstream: s.packages for s in states}
        forbidden = [*repos.values(), scratch]
        pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="verify")
        futures: list[Future[None]] = []
        server: ForkServer | None = None
        try:
            _say(progress, f"scratch trees of {', '.join(repos)} (the checkouts are only read)")
            made = {
                name: pool.submit(series_tree, repo, scratch / name / "series")
                for name, repo in repos.items()
            }
            if fork_server:
                server = _start_server(root, python, scratch, forbidden, packages, progress)
            trees = {name: future.result() for name, future in made.items()}
            runner = _Runner(root, python, server)
            _say(progress, f"running {len(states)} states, {jobs} at a time")

            def one(index: int, state: _State) -> None:
                own = dict(trees)
                if state.patch is not None:
                    dest = scratch / state.upstream / f"without-{state.patch.path.stem}"
                    own[state.upstream] = left_out_tree(trees[state.upstream], state.patch, dest)
                report = scratch / "reports" / f"{index}.txt"
                report.parent.mkdir(exist_ok=True)
                runner.run(state, state_env(own, packages, forbidden, report), report)
                _say(
                    progress, f"{state.label}: {state.seconds:.1f} s wall, {state.cpu_s:.1f} s CPU"
                )

            futures = [pool.submit(one, i, s) for i, s in enumerate(states)]
            for future in futures:
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            if server is not None:
                server.kill()
            kill_children()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            if server is not None:
                server.close()


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
    _say(
        progress,
        f"fork server: {ready['ready']['preloaded']} modules preloaded "
        f"({ready['ready']['cpu_s']} s CPU, once for every state)",
    )
    for note in ready.get("notes", []):
        _say(progress, f"fork server: not preloaded: {note}")
    return server


def verify_upstreams(
    root: Path,
    ups: list[Upstream],
    python: Path,
    progress: bool,
    jobs: int | None = None,
    fork_server: bool = True,
) -> list[Proof]:
    """Prove each patch of each upstream whose checkout is present and applied."""
    plans = [plan_upstream(root, up) for up in ups]
    pairs = [pair for plan in plans for pair in plan.states]
    # The pool takes states in this order: the longest first, as far as it can be told
    # before running (more Test: nodes, then left-out states, whose tests fail slowly).
    states = sorted(
        (state for pair in pairs for state in pair),
        key=lambda s: (-len(s.nodes), s.patch is None),
    )
    run_states(root, python, states, jobs or os.cpu_count() or 1, progress, fork_server)
    proofs: list[Proof] = []
    for plan in plans:
        proofs += plan.proofs
        for (proof, _), (with_all, without) in zip(plan.testable, plan.states, strict=True):
            proof.with_patch, why_with = _combine(with_all.outcomes, proof.tests)
            proof.without_patch, why_without = _combine(
                without.outcomes, proof.tests, want_each=FAILED
            )
            proof.verdict, proof.detail = _verdict(proof, why_with, why_without)
    return proofs


def verify_upstream(
    root: Path, up: Upstream, python: Path, progress: bool, jobs: int | None = None
) -> list[Proof]:
    """`verify_upstreams` of one upstream."""
    return verify_upstreams(root, [up], python, progress, jobs)


def tree_env_var(upstream: str) -> str:
    """The variable naming the tree a tripwire should read instead of 3rdparty/<upstream>."""
    return "PATCHTOOL_TREE_" + upstream.upper().replace("-", "_")


def tree_env(upstream: str, tree: Path) -> dict[str, str]:
    """Environment that points a patch's tests at `tree` instead of 3rdparty/<upstream>.

    Imports follow PYTHONPATH (the tree root, and `src/` for src-layout upstreams, ahead of the
    editable install); tests that read upstream files by path honour `PATCHTOOL_TREE_<NAME>`
    (tests/support/upstream_tree.py).
    """
    paths = [str(tree), str(tree / "src"), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in paths if p), tree_env_var(upstream): str(tree)}


def full_tree(scratch: Path, dest: Path) -> Path:
    """Scratch HEAD's whole tree in `dest` (the scratch work tree is sparse).

    Blobs absent from a partial mirror (large files) are left out; the sparse work tree's own
    files are laid over the top, since they are what the rebase is looking at.
    """
    listing = git(["ls-tree", "-r", "-z", "--format=%(objectname) %(path)", "HEAD"], scratch)
    entries = [e.split(" ", 1) for e in str(listing).split("\0") if e]
    check = git(
        ["cat-file", "--batch-check=%(objectname) %(objecttype)"],
        scratch,
        input="".join(f"{sha}\n" for sha, _ in entries),
    )
    present = {line.split(" ")[0] for line in str(check).splitlines() if line.endswith(" blob")}
    paths = [path for sha, path in entries if sha in present]
    archive = git_bytes(["archive", "--format=tar", "HEAD", "--", *paths], scratch)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    for rel in str(git(["ls-files", "-z"], scratch)).split("\0"):
        if rel and (scratch / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(scratch / rel, dest / rel)
    return dest


def tripwire_hook(root: Path, upstream: str, python: Path) -> TripwireHook:
    """A rebase evidence hook: True when the patch's tests pass on the new base without it."""

    def hook(name: str, patch: Patch, scratch: Path) -> bool | None:
        nodes = patch.trailer_values("Test")
        if not nodes:
            return None
        with tempfile.TemporaryDirectory(prefix="patchtool-tripwire-") as tmp:
            tree = full_tree(scratch, Path(tmp))
            outcomes = run_pytest(root, python, nodes, tree_env(upstream, tree))
        outcome, _ = _combine(outcomes, nodes)
        return None if outcome == SKIPPED else outcome == PASSED

    return hook


def _combine(outcomes: Outcomes, nodes: list[str], want_each: str = PASSED) -> tuple[str, str]:
    """Fold node outcomes: with-patch every node must pass; without, every node must fail."""
    results = [outcomes.of(node) for node in nodes]
    for outcome, detail in results:
        if outcome == INVALID:
            return INVALID, detail
    for outcome, detail in results:
        if outcome == SKIPPED:
            return SKIPPED, detail
    if want_each == FAILED:
        passing = [n for n, (o, _) in zip(nodes, results, strict=True) if o == PASSED]
        if passing:
            return PASSED, f"passes without the patch: {', '.join(passing)}"
        return FAILED, results[0][1]
    failing = [(n, d) for n, (o, d) in zip(nodes, results, strict=True) if o == FAILED]
    if failing:
        return FAILED, f"{failing[0][0]}: {failing[0][1]}"
    return PASSED, ""


def _verdict(proof: Proof, why_with: str, why_without: str) -> tuple[str, str]:
    if proof.with_patch == INVALID:
        return "NOT PROVEN", f"the series state is invalid: {why_with}"
    if proof.without_patch == INVALID:
        return "NOT PROVEN", f"the left-out state is invalid: {why_without}"
    if proof.with_patch == SKIPPED or proof.without_patch == SKIPPED:
        return NOT_VERIFIED, f"skipped: {why_with or why_without}"
    if proof.with_patch != PASSED:
        return "NOT PROVEN", f"fails with the patch: {why_with}"
    if proof.without_patch != FAILED:
        return "NOT PROVEN", f"does not trip without the patch: {why_without}"
    if proof.proxy:
        return PROVEN_ON_PROXY, f"on {proof.proxy}, not on the pinned commit"
    return PROVEN, ""


def _say(progress: bool, text: str) -> None:
    if progress:
        print(f"[verify] {text}", file=sys.stderr, flush=True)
