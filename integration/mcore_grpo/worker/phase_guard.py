"""The worker's phase contract: which entry point may run in which phase.

Phases follow NeMo-RL's worker protocol. Every entry point calls `PhaseGuard.require` first;
a wrong phase raises a RuntimeError naming the call and the `prepare_for_*` step that was
skipped, instead of failing later with an opaque device error (NeMo-RL PR #2393's contract).
"""

from __future__ import annotations

import enum


class Phase(enum.Enum):
    """Where the weights are and what they are ready for."""

    TRAINING = "training"
    LOGPROB_INFERENCE = "logprob_inference"
    GENERATION = "generation"
    OFFLOADED = "offloaded"


# The step that enters each phase.
PREPARE_STEP: dict[Phase, str] = {
    Phase.TRAINING: "prepare_for_training()",
    Phase.LOGPROB_INFERENCE: "prepare_for_lp_inference()",
    Phase.GENERATION: "prepare_for_generation()",
    Phase.OFFLOADED: "offload_before_refit()/offload_after_refit()",
}


class PhaseGuard:
    """Holds the current phase; `require` is the single check every entry point makes."""

    def __init__(self, initial: Phase = Phase.TRAINING) -> None:
        self._phase = initial

    @property
    def phase(self) -> Phase:
        """The current phase."""
        return self._phase

    def enter(self, phase: Phase) -> None:
        """Record a completed transition (called by the prepare_*/offload_* steps)."""
        self._phase = phase

    def require(self, call: str, *allowed: Phase) -> None:
        """Raise unless the current phase is one of `allowed`."""
        if self._phase in allowed:
            return
        steps = " or ".join(PREPARE_STEP[p] for p in allowed)
        if self._phase is Phase.OFFLOADED:
            reason = "the weights are offloaded"
        else:
            reason = f"the worker is in phase '{self._phase.value}'"
        raise RuntimeError(
            f"{call} called while {reason}; call {steps} first "
            f"(allowed phases: {', '.join(p.value for p in allowed)})."
        )
