"""`verify --on main`: each patch's upstream test proven where its PR goes.

The same proof as on the pin (upstream_proof.py): the patch's `Upstream-Test:` passes on the
series tree and fails with the patch's source change left out, run from the upstream tree under
its own pytest configuration. Here the series tree is the upstream's `main` with every patch's
port (else its pin patch) applied (rebase/on_main.py), and the left-out change is the one
applied there (the port's, where it has one). Every upstream's main tree is on every state's
path, so Megatron-Bridge's tests on main import Megatron-LM's main with its series. No gate: the
regression gate compares the upstream's own suites around our series on the pin, which verify
without `--on` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..model.manifest import Upstream
from ..model.series import Patch, SeriesEntry
from ..model.test_suites import UpstreamSuite, load_suites
from ..source.checkout import checkout_dir
from .states import VerifyState, run_states
from .tripwire import import_roots
from .upstream_proof import SuitePlan, UpstreamProof, fold_suite, plan_suite


@dataclass(frozen=True)
class OnMain:
    """One upstream's series as applied on its main: the repository whose HEAD it is."""

    upstream: Upstream
    repo: Path
    series: list[tuple[SeriesEntry, Patch]]


def plan_on_main(root: Path, item: OnMain, suite: UpstreamSuite) -> SuitePlan:
    """The upstream-test states of one upstream on main.

    The plan is made against the checkout (the same layout: test directories and packages are
    found on disk there); every state then reads its trees from the replay's HEAD."""
    checkout = checkout_dir(root, item.upstream)
    patches = [patch for _, patch in item.series]
    packages = import_roots(patches, root, checkout)
    plan = plan_suite(suite, item.series, checkout, packages, gate=False)
    for state in plan.states:
        state.repo = item.repo
    return plan


def verify_on_main(
    root: Path, python: Path, items: list[OnMain], progress: bool, jobs: int, fork_server: bool
) -> tuple[list[UpstreamProof], list[tuple[str, float, float]]]:
    """Run every upstream's states in one pool; each patch's proof and each state's timing."""
    suites = load_suites(root)
    plans = [
        plan_on_main(root, item, suites[item.upstream.name])
        for item in items
        if item.upstream.name in suites
    ]
    states: list[VerifyState] = [s for plan in plans for s in plan.states]
    ordered = sorted(states, key=lambda s: (-len(s.nodes), s.patch is None))
    run_states(root, python, ordered, jobs, progress, fork_server)
    proofs: list[UpstreamProof] = []
    for plan in plans:
        fold_suite(plan)
        proofs += plan.proofs
    timings = [(s.label, round(s.seconds, 1), round(s.cpu_s, 1)) for s in ordered]
    return proofs, timings
