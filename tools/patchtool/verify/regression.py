"""The regression gate: the upstream's own tests of the code the series touches, before the
series and after it.

A test that passed before and does not pass after (failed, skipped, or gone) is *broken*: the
series would fail the upstream's CI there, and `verify` fails naming the test and the patch
that broke it (the first prefix of the series on which it stops passing). Tests that already
fail before the series (no Transformer Engine, no CUDA, ...) are counted with their cause,
never hidden; tests the series adds are counted as added. Unless the whole baseline ran
(`--full-baseline`), tests that pass on the series were not run before (baseline.py): they are
counted as such, and "fixed" then counts only what did run.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from ..model.series import Patch
from .pytest_run import FAILED, NOT_RUN, PASSED, SKIPPED, Outcomes
from .states import VerifyState
from .upstream_proof import SuitePlan

_CPU_SKIP_RE = re.compile(r"^upstream-cpu: (needs [^(]+?)\s*(\(|$)")


@dataclass
class Counts:
    """The gate's figures over a set of test directories."""

    run: int = 0
    passed: int = 0
    failing_before: int = 0
    failing_after: int = 0
    skipped: int = 0
    added: int = 0
    fixed: int = 0
    broken: int = 0
    not_run_before: int = 0  # passed on the series, so not run on the baseline (baseline.py)
    causes: dict[str, int] = field(default_factory=dict)  # why tests fail or skip after


@dataclass
class Broken:
    node: str
    before: str
    after: str
    detail: str
    patch: str = ""  # the first patch on which it stops passing ("" until attributed)
    known: str = ""  # why, where patches/upstream-tests.toml lists it as known broken


@dataclass
class Gate:
    """One upstream's gate: totals, per patch, and every broken test."""

    upstream: str
    baseline: str
    dirs: list[str]
    total: Counts
    per_patch: dict[str, Counts]
    broken: list[Broken]
    stale_known: list[str] = field(default_factory=list)  # listed as broken, but not broken
    # Directories the series touches that this run did not gate (`deferred` in
    # patches/upstream-tests.toml; `verify --full-gate` runs them): directory -> why.
    deferred: dict[str, str] = field(default_factory=dict)

    @property
    def new_broken(self) -> list[Broken]:
        """The broken tests nobody has listed: these fail verify."""
        return [b for b in self.broken if not b.known]


def cause(outcome: str, detail: str) -> str:
    """A short, countable reason for a test that does not pass."""
    match = _CPU_SKIP_RE.match(detail)
    if match:
        return match.group(1)
    first = detail.strip().splitlines()[0] if detail.strip() else outcome
    first = re.sub(r"0x[0-9a-f]+|\d+", "N", first)
    return f"{outcome}: {first[:90]}"


def in_dirs(node: str, dirs: list[str]) -> bool:
    """Whether `node`'s file lies directly in one of `dirs`."""
    folder = node.split("::")[0].rpartition("/")[0]
    return folder in dirs


def count(before: Outcomes, after: Outcomes, dirs: list[str]) -> tuple[Counts, list[Broken]]:
    """The figures over `dirs`, and its broken tests."""
    counts, broken = Counts(), []
    causes: Counter[str] = Counter()
    nodes = sorted(n for n in {*before.by_node, *after.by_node} if in_dirs(n, dirs))
    for node in nodes:
        old = before.by_node.get(node)
        new = after.by_node.get(node)
        if new is not None:
            counts.run += 1
            counts.passed += new[0] == PASSED
            counts.failing_after += new[0] == FAILED
            counts.skipped += new[0] == SKIPPED
            if new[0] != PASSED:
                causes[cause(*new)] += 1
        if old is None:
            counts.added += new is not None
            continue
        if old[0] == NOT_RUN:
            counts.not_run_before += 1
            continue
        counts.failing_before += old[0] != PASSED
        if old[0] == PASSED and (new is None or new[0] != PASSED):
            outcome, detail = new or ("gone", "not collected on the series tree")
            broken.append(Broken(node, old[0], outcome, detail))
        elif old[0] != PASSED and new is not None and new[0] == PASSED:
            counts.fixed += 1
    counts.broken = len(broken)
    counts.causes = dict(sorted(causes.items(), key=lambda kv: (-kv[1], kv[0])))
    return counts, broken


def gate_of(plan: SuitePlan) -> Gate | None:
    """The gate of one planned suite from its before/after outcomes (None: nothing to gate and
    nothing deferred; with every touched directory deferred, an empty gate that lists them)."""
    deferred = {d: plan.suite.deferred[d] for proof in plan.proofs for d in proof.deferred_dirs}
    deferred = dict(sorted(deferred.items()))
    if plan.before is None or plan.after is None:
        if not deferred:
            return None
        return Gate(plan.suite.upstream, plan.baseline_label, [], Counts(), {}, [], [], deferred)
    dirs = plan.before.dirs
    total, broken = count(plan.before.outcomes, plan.after.outcomes, dirs)
    per_patch = {
        proof.patch: count(plan.before.outcomes, plan.after.outcomes, proof.gate_dirs)[0]
        for proof in plan.proofs
    }
    known = plan.suite.known_broken
    for item in broken:
        item.known = known.get(item.node, "")
    stale = sorted(set(known) - {b.node for b in broken})
    return Gate(
        plan.suite.upstream,
        plan.baseline_label,
        dirs,
        total,
        per_patch,
        broken,
        stale,
        deferred,
    )


def attribution_states(plan: SuitePlan, gate: Gate) -> list[tuple[int, VerifyState]]:
    """States that run the broken tests on each prefix of the series past the baseline:
    (prefix length, state). The series tree itself is the full prefix, already run."""
    if not gate.new_broken or plan.after is None:
        return []
    nodes = sorted({b.node for b in gate.new_broken})
    states = []
    for size in range(plan.baseline_index + 1, len(plan.series)):
        state = VerifyState(
            plan.suite.upstream,
            plan.after.repo,
            nodes,
            packages=plan.after.packages,
            suite=plan.suite,
            reverse=plan.series[size:],
            role=f"broken tests on the series up to {plan.series[size - 1].path.name}",
        )
        states.append((size, state))
    return states


def attribute(gate: Gate, series: list[Patch], prefixes: list[tuple[int, VerifyState]]) -> None:
    """Name, for each broken test, the first patch after which it no longer passes."""
    for item in gate.new_broken:
        culprit = series[-1]
        for size, state in prefixes:
            if state.outcomes.of(item.node)[0] != PASSED:
                culprit = series[size - 1]
                break
        item.patch = culprit.path.name
