"""`verify`: the tripwire proof of every patch.

A patch is proven when its `Test:` nodes pass on the tree with the whole series applied and fail
on the same tree with only that patch left out. The user's checkout is never touched: each
state is a scratch tree of its own (the checkout's HEAD via `git archive`, once per upstream;
a left-out state hard-links that tree and reverse-applies its patch on private copies of the
patch's files). A state names a tree for every upstream being verified (the others' series
trees), through `PATCHTOOL_TREE_<UPSTREAM>` and PYTHONPATH, as `rebase --tripwires` does.

Each upstream has one state that runs every patch's tests with the series, and each patch one
state that runs its tests without the patch, each state one process. The processes are forked
by a server (forkserver.py) that imported the project's heavy third-party modules once
(`[tool.patchtool.verify] preload` in pyproject.toml), which cuts each process's start from
~15 s of CPU to ~1 s; the tests' own rank processes are forked by it too
(tests/support/python_process.py). Every child checks, when it ends, that each
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

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PatchToolError
from ..model.manifest import Upstream
from ..model.series import Patch, SeriesEntry, load_series
from ..model.test_suites import UpstreamSuite
from ..source.checkout import checkout_dir, dirty_files
from ..source.detect import MISSING, STANDIN, Source, detect_source
from ..source.proxy import check_series, proxy_name
from ..source.state import upstream_status
from .pytest_run import FAILED, INVALID, NOT_RUN, PASSED, SKIPPED, Outcomes, run_pytest
from .states import VerifyState
from .trees import full_tree, tree_env
from .upstream_proof import dependents_of

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


def source_label(source: Source) -> str:
    """How exact a verification on this source is; never claims more than it is."""
    if source.proxy:
        return f"PROXY ({source.detail})"
    if source.kind == STANDIN:
        return f"stand-in ({source.detail})"
    return f"exact pin ({source.kind})"


@dataclass
class TripwirePlan:
    """What verify will run for one upstream: its proofs and, per proof, its two states."""

    proofs: list[Proof]
    testable: list[tuple[Proof, Patch]]
    # (with the series, without the patch) per testable; the first is one state shared by all
    states: list[tuple[VerifyState, VerifyState]]
    # For the upstream's own tests (upstream_proof.py): set when the source is the exact pin.
    series: list[tuple[SeriesEntry, Patch]] = field(default_factory=list)
    repo: Path | None = None
    packages: list[str] = field(default_factory=list)


def import_roots(patches: list[Patch], root: Path, repo: Path) -> list[str]:
    """The upstream's import packages the series touches (e.g. `megatron.core`, `nemo_rl`).

    A changed Python file's package is the first regular package (a directory with an
    `__init__.py` in `repo`, the upstream's checkout) on its path, `src/` layouts stripped:
    Megatron-LM's `megatron/core` and Megatron-Bridge's `src/megatron/bridge` share the
    namespace package `megatron`, and claiming all of `megatron` for both would make every
    state import one upstream from the other's tree. Names this repository itself has at
    its root (its own `tests`, `tools`) are left out.
    """
    names: set[str] = set()
    for patch in patches:
        for changed in patch.files:
            for rel in filter(None, (changed.path, changed.old_path)):
                if rel.endswith(".py"):
                    names.add(_package_of(rel, repo))
    return sorted(n for n in names if not _ours(n, root))


def _package_of(rel: str, repo: Path) -> str:
    """`rel`'s import package: its dotted path down to the first regular package (or the
    module itself at top level, or the deepest directory when every level is a namespace)."""
    parts = rel.split("/")
    base = repo
    if parts[0] == "src" and len(parts) > 1:
        parts, base = parts[1:], repo / "src"
    dirs = parts[:-1]
    if not dirs:
        return parts[0].removesuffix(".py")
    for depth in range(1, len(dirs) + 1):
        if (base.joinpath(*dirs[:depth]) / "__init__.py").is_file():
            return ".".join(dirs[:depth])
    return ".".join(dirs)


def _ours(package: str, root: Path) -> bool:
    top = package.split(".")[0]
    return (root / top).exists() or (root / f"{top}.py").exists()


def plan_upstream(root: Path, up: Upstream, suite: UpstreamSuite | None) -> TripwirePlan:
    """The proofs of `up`'s series and the states to run for them (nothing runs yet); `suite`
    (its layout in patches/upstream-tests.toml, if any) says which files are its tests."""
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
        return TripwirePlan(proofs, [], [])
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
    packages = import_roots([patch for _, patch in series], root, repo)
    # A left-out state leaves the patch's upstream tests in place: our tripwires never run
    # them, and a later patch may extend the same test file (its hunks would not reverse).
    keep = (f"{suite.test_top}/*",) if suite else ()
    # One state runs every patch's tests on the series trees (one process, one import of the
    # upstreams: ~10 s of CPU each, for tests of a second or two); each left-out state stays a
    # process of its own, so no patch's failure without it can lean on another's tests.
    states = _states(up.name, repo, testable, [patch for _, patch in series], packages, keep)
    exact = not source.proxy and source.kind != STANDIN
    return TripwirePlan(proofs, testable, states, series if exact else [], repo, packages)


def _states(
    upstream: str,
    repo: Path,
    testable: list[tuple[Proof, Patch]],
    ordered: list[Patch],
    packages: list[str],
    keep: tuple[str, ...],
) -> list[tuple[VerifyState, VerifyState]]:
    """Per testable patch: the one state that runs every patch's tests on the series trees,
    and the patch's own left-out state (`_left_out_with`)."""
    nodes = list(dict.fromkeys(node for proof, _ in testable for node in proof.tests))
    with_series = VerifyState(upstream, repo, nodes, None, packages, name="the series")
    return [
        (
            with_series,
            VerifyState(
                upstream,
                repo,
                proof.tests,
                patch,
                packages,
                name=patch.path.name,
                exclude=keep,
                reverse=_left_out_with(patch, ordered, upstream),
            ),
        )
        for proof, patch in testable
    ]


def _left_out_with(patch: Patch, ordered: list[Patch], upstream: str) -> list[Patch]:
    """What a left-out state reverse-applies besides `patch` alone: where a later patch
    `Depends-On` it (it may change the very lines `patch` adds), the tail of the series from
    `patch` on, as the upstream proof leaves it out (`upstream_proof.dependents_of`); else
    nothing more."""
    index = ordered.index(patch)
    return ordered[index:] if dependents_of(patch, ordered[index + 1 :], upstream) else []


def fold_plan(plan: TripwirePlan) -> None:
    """Each testable proof's verdict from its two states' outcomes."""
    for (proof, _), (with_all, without) in zip(plan.testable, plan.states, strict=True):
        proof.with_patch, why_with = _combine(with_all.outcomes, proof.tests)
        proof.without_patch, why_without = _combine(without.outcomes, proof.tests, want_each=FAILED)
        proof.verdict, proof.detail = _verdict(proof, why_with, why_without)


# What rebase calls after replaying a patch (its `TripwireHook`, structurally: verify does
# not import rebase): True/False the patch's tripwire passed, None when it could not run.
TripwireHook = Callable[[str, Patch, Path], bool | None]


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
