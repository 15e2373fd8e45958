"""The upstream half of `verify`: each patch's own upstream test, and the regression gate.

A patch's `Upstream-Test:` nodes are the test it carries into the upstream's own tree, the one
its PR will show. They are proven like our tripwires, but the upstream's way: run from the
upstream tree under its own pytest configuration (plus the CPU compatibility plugin), passing
on the series tree and failing on the series tree with the patch's *source* change left out
(its test files stay, so the test itself is what runs). When a later patch of the same upstream
`Depends-On` the patch, that later patch cannot stand without it (it imports what the patch
adds), so the source of the whole tail from the patch on is left out instead: the tree is the
series up to the patch, less its source, plus the tail's test files.

The same run on the series tree also runs every upstream test file in the directories that
mirror the source files the series changes; a second run does so on the "before" tree (the pin,
or the nearest tree that imports: `baseline` in patches/upstream-tests.toml). regression.py
compares the two.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PatchToolError
from ..model.series import Patch, SeriesEntry, parse_depends
from ..model.test_suites import UpstreamSuite, upstream_tests
from .pytest_run import FAILED, INVALID, PASSED, SKIPPED, Outcomes
from .states import VerifyState

NONE = "none"


@dataclass
class UpstreamProof:
    """One patch's upstream test: its outcome with the series and with its source left out."""

    upstream: str
    patch: str
    tests: list[str]
    with_fix: str = NONE
    without_fix: str = NONE
    verdict: str = NONE
    detail: str = ""
    without_detail: str = ""  # how the test failed without the source (what it proves)
    gate_dirs: list[str] = field(default_factory=list)
    deferred_dirs: list[str] = field(default_factory=list)  # gated only by --full-gate
    pending: str = ""  # why the patch has no upstream test yet (patches/upstream-tests.toml)
    needs_hardware: str = ""  # what its test needs that this machine lacks (the same file)

    @property
    def proven(self) -> bool:
        return self.verdict == "proven"

    @property
    def excused(self) -> bool:
        """Unproven for a reason patches/upstream-tests.toml states: no upstream test yet, or
        one that skips for want of hardware listed there."""
        return bool(self.pending) or bool(
            self.needs_hardware and self.verdict == "not verified here"
        )


@dataclass
class SuitePlan:
    """What verify runs of one upstream's own suite, and the states that do it."""

    suite: UpstreamSuite
    proofs: list[UpstreamProof]
    after: VerifyState | None = None  # the series tree: every upstream test and gate file
    before: VerifyState | None = None  # the baseline tree: the gate files
    without: list[tuple[UpstreamProof, VerifyState]] = field(default_factory=list)
    series: list[Patch] = field(default_factory=list)
    baseline_index: int = 0  # patches[:baseline_index] are in the "before" tree

    @property
    def states(self) -> list[VerifyState]:
        """The states of this suite: the series run, the before run, one per left-out source."""
        listed = [self.after, self.before, *(state for _, state in self.without)]
        return [state for state in listed if state is not None]

    @property
    def baseline_label(self) -> str:
        if not self.suite.baseline:
            return "the pin"
        return f"the pin + the series up to {self.suite.baseline} ({self.suite.baseline_reason})"


def baseline_index(suite: UpstreamSuite, series: list[tuple[SeriesEntry, Patch]]) -> int:
    """How many patches of the series the gate's "before" tree keeps."""
    if not suite.baseline:
        return 0
    names = [entry.name for entry, _ in series]
    if suite.baseline not in names:
        raise PatchToolError(
            f"patches/upstream-tests.toml [{suite.upstream}]: baseline {suite.baseline!r} is not "
            f'in patches/{suite.upstream}/series; name a patch of the series or set baseline = ""'
        )
    return names.index(suite.baseline) + 1


def check_deferred(suite: UpstreamSuite, repo: Path) -> None:
    """Refuse a deferred gate directory the upstream's tree does not have (a typo defers
    nothing and would go unnoticed)."""
    missing = [d for d in suite.deferred if not (repo / d).is_dir()]
    if missing:
        raise PatchToolError(
            f"patches/upstream-tests.toml [{suite.upstream}.deferred]: {missing[0]!r} is not a "
            f"directory of {suite.upstream}'s tree; name a test directory below {suite.tests_root}"
        )


def _proof(suite: UpstreamSuite, patch: Patch, repo: Path, full_gate: bool) -> UpstreamProof:
    """The patch's proof, its touched test directories split into gated and deferred."""
    touched = suite.gate_dirs(patch, repo)
    deferred = [] if full_gate else [d for d in touched if d in suite.deferred]
    return UpstreamProof(
        suite.upstream,
        patch.path.name,
        upstream_tests(patch),
        gate_dirs=[d for d in touched if d not in deferred],
        deferred_dirs=deferred,
    )


def plan_suite(
    suite: UpstreamSuite,
    series: list[tuple[SeriesEntry, Patch]],
    repo: Path,
    packages: list[str],
    gate: bool = True,
    full_gate: bool = False,
) -> SuitePlan:
    """The states that prove each patch's upstream test and run the gate (nothing runs yet);
    the suite's deferred gate directories only with `full_gate`."""
    check_deferred(suite, repo)
    patches = [patch for _, patch in series]
    proofs = [_proof(suite, p, repo, full_gate) for p in patches]
    plan = SuitePlan(suite, proofs, series=patches, baseline_index=baseline_index(suite, series))
    nodes = sorted({node for proof in proofs for node in proof.tests})
    dirs = sorted({d for proof in proofs for d in proof.gate_dirs}) if gate else []
    common = {"upstream": suite.upstream, "repo": repo, "packages": packages, "suite": suite}
    if nodes or dirs:
        plan.after = VerifyState(nodes=nodes, dirs=dirs, role="own tests on the series", **common)
    if dirs:
        plan.before = VerifyState(
            nodes=[],
            dirs=dirs,
            reverse=patches[plan.baseline_index :],
            role="own tests before the series",
            **common,
        )
    for index, (proof, patch) in enumerate(zip(proofs, patches, strict=True)):
        proof.needs_hardware = suite.needs_hardware.get(proof.patch, "")
        if not proof.tests:
            proof.pending = suite.pending.get(proof.patch, "")
            proof.detail = "the patch has no Upstream-Test: trailer" + (
                f" (pending: {proof.pending})" if proof.pending else ""
            )
            continue
        dependents = dependents_of(patch, patches[index + 1 :], suite.upstream)
        role = f"own test without the source of {patch.path.name}"
        if dependents:
            role += f" and of the patches after it ({', '.join(dependents)} Depends-On it)"
        state = VerifyState(
            nodes=proof.tests,
            reverse=patches[index:] if dependents else [patch],
            exclude=(f"{suite.test_top}/*",),
            role=role,
            name=patch.path.name,
            **common,
        )
        plan.without.append((proof, state))
    return plan


def dependents_of(patch: Patch, later: list[Patch], upstream: str) -> list[str]:
    """The later patches of `upstream`'s series that name `patch` in `Depends-On:`."""
    wanted = (upstream, patch.path.name)
    return [
        other.path.name
        for other in later
        if any(parse_depends(value) == wanted for value in other.trailer_values("Depends-On"))
    ]


def fold_suite(plan: SuitePlan) -> None:
    """Each proof's verdict from the states' outcomes."""
    after = plan.after.outcomes if plan.after else Outcomes()
    for proof, state in plan.without:
        proof.with_fix, why_with = _fold(after, proof.tests, PASSED)
        proof.without_fix, why_without = _fold(state.outcomes, proof.tests, FAILED)
        proof.without_detail = why_without
        proof.verdict, proof.detail = _verdict(proof, why_with, why_without)


def _fold(outcomes: Outcomes, nodes: list[str], want: str) -> tuple[str, str]:
    """PASSED when every node passed, FAILED when every node failed, else the odd one out."""
    results = [(node, *outcomes.of(node)) for node in nodes]
    for node, outcome, detail in results:
        if outcome in (INVALID, SKIPPED):
            return outcome, f"{node}: {detail}"
    odd = [(node, detail) for node, outcome, detail in results if outcome != want]
    if not odd:
        return want, results[0][2] if want == FAILED else ""
    other = FAILED if want == PASSED else PASSED
    node, detail = odd[0]
    return other, f"{node}: {detail}" if detail else f"{node} {other}"


def _verdict(proof: UpstreamProof, why_with: str, why_without: str) -> tuple[str, str]:
    if proof.with_fix == INVALID or proof.without_fix == INVALID:
        return "NOT PROVEN", f"a state is invalid: {why_with or why_without}"
    if proof.with_fix == SKIPPED or proof.without_fix == SKIPPED:
        return "not verified here", f"skipped: {why_with or why_without}"
    if proof.with_fix != PASSED:
        return "NOT PROVEN", f"fails with the patch: {why_with}"
    if proof.without_fix != FAILED:
        return "NOT PROVEN", f"passes without the patch's source change: {why_without}"
    return "proven", ""
