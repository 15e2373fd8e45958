"""One `verify` run over the stack: the tripwires (tripwire.py), each patch's upstream test
(upstream_proof.py) and the regression gate (regression.py), all states in one pool.

Why one pool: every state is one process on scratch trees; running them together keeps both
cores busy (the upstream suites import megatron-core afresh, ~20 s of CPU each, and cannot be
preloaded by the fork server). Each gate's baseline runs right after its series run, in the
same slot, once that run has said which tests do not pass there (baseline.py, baseline_round.py):
only those can be broken. A last,
small round runs only when the gate finds broken tests: those tests on each prefix of the
series, to name the patch that broke each.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..model.manifest import Upstream
from ..model.test_suites import UpstreamSuite, load_suites
from . import state_cache
from .baseline_round import BaselineRound
from .regression import Gate, attribute, attribution_states, gate_of
from .states import Follow, StateRunner, VerifyState, say
from .tripwire import Proof, TripwirePlan, fold_plan, plan_upstream
from .upstream_proof import SuitePlan, UpstreamProof, fold_suite, plan_suite


@dataclass
class Options:
    """What to run (all by default) and how."""

    jobs: int = 1
    fork_server: bool = True
    tripwires: bool = True
    own_tests: bool = True  # each patch's Upstream-Test, proven
    gate: bool = True  # the upstream's tests of the touched directories, before and after
    full_gate: bool = False  # also the directories a suite defers (patches/upstream-tests.toml)
    full_baseline: bool = False  # the baseline runs every gate test, not only the non-passing
    cache: bool = True  # keep each state's outcomes, keyed by everything they depend on
    fresh: bool = False  # run every state even when the cache holds it (and keep the new runs)


@dataclass
class StackResult:
    proofs: list[Proof] = field(default_factory=list)
    upstream: list[UpstreamProof] = field(default_factory=list)
    gates: list[Gate] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # suites not run here, and why
    seconds: dict[str, float] = field(default_factory=dict)  # wall per kind of state
    timings: list[tuple[str, float, float]] = field(default_factory=list)  # label, wall, CPU


def _suite_plans(
    suites: dict[str, UpstreamSuite],
    ups: list[Upstream],
    plans: list[TripwirePlan],
    opts: Options,
    notes: list[str],
) -> list[SuitePlan]:
    out = []
    for up, plan in zip(ups, plans, strict=True):
        suite = suites.get(up.name)
        if suite is None:
            notes.append(
                f"{up.name}: no [{up.name}] in patches/upstream-tests.toml: its own tests are not run"
            )
        elif not plan.series or plan.repo is None:
            notes.append(
                f"{up.name}: its own tests need the exact pinned source (a clone), not a release "
                "archive or a missing checkout: not run here"
            )
        else:
            out.append(
                plan_suite(
                    suite,
                    plan.series,
                    plan.repo,
                    plan.packages,
                    gate=opts.gate,
                    full_gate=opts.full_gate,
                )
            )
    return out


def verify_stack(
    root: Path, ups: list[Upstream], python: Path, progress: bool, opts: Options
) -> StackResult:
    """Plan, run and fold every state of `ups`."""
    result = StackResult()
    layouts = load_suites(root)
    plans = [plan_upstream(root, up, layouts.get(up.name)) for up in ups]
    suites = (
        _suite_plans(layouts, ups, plans, opts, result.notes) if opts.own_tests or opts.gate else []
    )
    # Each plan's "with the series" state is shared by its pairs: run (and count) it once.
    tripwire_states = (
        list({id(s): s for plan in plans for pair in plan.states for s in pair}.values())
        if opts.tripwires
        else []
    )
    inputs = (
        state_cache.key_inputs(root, python, [up.name for up in ups], [p.suite for p in suites])
        if opts.cache
        else None
    )
    suite_states = [s for plan in suites for s in plan.states]
    baselines = BaselineRound(
        [] if opts.full_baseline else suites, root, inputs, opts.fresh, progress
    )
    later = baselines.states
    # Longest first, as far as can be told before running: the suite runs (many files), then
    # states with more nodes, then left-out states (their tests fail slowly).
    ordered = sorted(
        [s for s in [*suite_states, *tripwire_states] if all(s is not b for b in later)],
        key=lambda s: (-len(s.dirs), -len(s.nodes), s.patch is None),
    )
    everything = [*ordered, *later]
    dropped: list[str] = []
    with StateRunner(root, python, everything, opts.jobs, progress, opts.fork_server) as runner:
        _run_cached(runner, root, ordered, opts, inputs, dropped, baselines.after_ran)
        baselines.run_rest(runner)
        baselines.store(dropped)
        if inputs is not None:
            result.notes += _cache_notes(everything, dropped)
        result.seconds = _seconds(tripwire_states, suite_states)
        result.timings = [
            (f"{s.label} (cached)" if s.cached else s.label, round(s.seconds, 1), round(s.cpu_s, 1))
            for s in everything
        ]
        for plan in plans:
            if opts.tripwires:
                fold_plan(plan)
            result.proofs += plan.proofs
        for suite in suites:
            fold_suite(suite)
            result.upstream += suite.proofs
            gate = gate_of(suite)
            if gate is not None:
                _attribute(runner, root, progress, opts, suite, gate, inputs)
                result.gates.append(gate)
    return result


def _run_cached(
    runner: StateRunner,
    root: Path,
    states: list[VerifyState],
    opts: Options,
    inputs: state_cache.KeyInputs | None,
    dropped: list[str],
    follow: Follow | None = None,
) -> None:
    """Run `states`, reading back those whose outcomes the cache holds under their key
    (state_cache.py) and keeping what ran for the next verify (the labels of runs not worth
    keeping go to `dropped`); `inputs` None: no cache. `follow`: see StateRunner.run."""
    if inputs is None:
        runner.run(states, follow)
        return
    if not opts.fresh:
        for state in states:
            state_cache.read_back(root, state, inputs)
    runner.run([s for s in states if not s.cached], follow)
    dropped += state_cache.keep_ran(root, states, inputs)


def _cache_notes(states: list[VerifyState], dropped: list[str]) -> list[str]:
    """What the cache did for this run's states, in one line each."""
    notes, read = [], sum(s.cached for s in states)
    if read:
        notes.append(
            f"{read} of {len(states)} states read back from {state_cache.CACHE_DIR} (same trees, "
            "tests, environment and plugins); --fresh runs them again"
        )
    if dropped:
        notes.append(
            f"{len(dropped)} states not kept for the next verify (a test timed out, or the run "
            f"proves nothing): {', '.join(dropped[:3])}{' ...' if len(dropped) > 3 else ''}"
        )
    return notes


def _attribute(
    runner: StateRunner,
    root: Path,
    progress: bool,
    opts: Options,
    suite: SuitePlan,
    gate: Gate,
    inputs: state_cache.KeyInputs | None,
) -> None:
    prefixes = attribution_states(suite, gate)
    if prefixes:
        say(
            progress,
            f"{gate.upstream}: {len(gate.new_broken)} upstream tests broken; finding the patch",
        )
        _run_cached(runner, root, [s for _, s in prefixes], opts, inputs, [])
    if gate.new_broken:
        attribute(gate, suite.series, prefixes)


def _seconds(tripwires: list[VerifyState], suites: list[VerifyState]) -> dict[str, float]:
    """Process seconds per kind of state (summed wall of each state; the pool overlaps them)."""
    return {
        "tripwire states": round(sum(s.seconds for s in tripwires), 1),
        "upstream suite states": round(sum(s.seconds for s in suites), 1),
    }


def verify_upstreams(
    root: Path,
    ups: list[Upstream],
    python: Path,
    progress: bool,
    jobs: int | None = None,
    fork_server: bool = True,
) -> list[Proof]:
    """The tripwire proofs alone of each upstream whose checkout is present and applied."""
    # Rebase runs this on checkouts off the manifest's pins: nothing may be read back.
    opts = Options(
        jobs or os.cpu_count() or 1, fork_server, own_tests=False, gate=False, cache=False
    )
    return verify_stack(root, ups, python, progress, opts).proofs


def verify_upstream(
    root: Path, up: Upstream, python: Path, progress: bool, jobs: int | None = None
) -> list[Proof]:
    """`verify_upstreams` of one upstream."""
    return verify_upstreams(root, [up], python, progress, jobs)
