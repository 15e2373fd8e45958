"""When the gates' reduced baselines run: each right after its series run, in the same pool
slot, so it overlaps the rest of the states instead of waiting for all of them.

A baseline needs its series run's outcomes (baseline.py); a series run read back from the cache
never ends in the pool, so its baseline runs in a round of its own after the pool's.
"""

from __future__ import annotations

from pathlib import Path

from . import state_cache
from .baseline import passed_on_series
from .states import StateRunner, VerifyState, say
from .upstream_proof import SuitePlan


class BaselineRound:
    """The baselines of `plans` (those with a series run and a gate), run after their series."""

    def __init__(
        self,
        plans: list[SuitePlan],
        root: Path,
        inputs: state_cache.KeyInputs | None,
        fresh: bool,
        progress: bool,
    ) -> None:
        self.root, self.inputs, self.fresh, self.progress = root, inputs, fresh, progress
        self._waiting = {
            id(p.after): (p.after, p.before)
            for p in plans
            if p.before is not None and p.after is not None
        }
        self.states = [before for _, before in self._waiting.values()]

    def after_ran(self, state: VerifyState) -> list[VerifyState]:
        """Called in the pool when `state` ended: its baseline, if it has one still to run."""
        pair = self._waiting.pop(id(state), None)
        return self._ready(*pair) if pair else []

    def run_rest(self, runner: StateRunner) -> None:
        """The baselines whose series run was read back, not run: in a round of their own."""
        pairs = list(self._waiting.values())
        self._waiting.clear()
        runner.run([s for after, before in pairs for s in self._ready(after, before)])

    def store(self, dropped: list[str]) -> None:
        """Keep each baseline that ran for the next verify (else its label goes to `dropped`)."""
        if self.inputs is not None:
            dropped += state_cache.keep_ran(self.root, self.states, self.inputs)

    def _ready(self, after: VerifyState, before: VerifyState) -> list[VerifyState]:
        """`before` less what passed on the series: [] when the cache holds its outcomes."""
        before.skip = passed_on_series(after.outcomes)
        say(
            self.progress,
            f"{before.upstream}: the baseline leaves out the {len(before.skip)} gate tests "
            "that pass on the series (--full-baseline runs them)",
        )
        inputs = None if self.fresh else self.inputs
        read = inputs is not None and state_cache.read_back(self.root, before, inputs)
        return [] if read else [before]
