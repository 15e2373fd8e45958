"""When a row of `docs/models.json` passes: the bar a difference must stay under, and the
verdict on a recorded row.

One home for the rule, read by both sides: `matrix` records the bar in the JSON, counts the
passing rows and names the regressions against a baseline; `page` renders the verdicts.
"""

from __future__ import annotations

import math
from typing import Any

TOLERANCE = 1e-4  # fp32, max abs difference of logits
SHARED_PREFIX_TOLERANCE = 1e-5  # logprobs, and every gradient relative (docs/shared-prefix.md)


def step_passes(step: dict[str, float] | None) -> bool:
    """The GRPO step's check: its loss is finite and the weights moved."""
    if not step:
        return False  # not measured (an earlier check failed)
    return math.isfinite(step["loss"]) and step["max_weight_change"] > 0


def shared_prefix_passes(result: dict[str, Any] | None) -> bool:
    """The shared-prefix check at one layout: off with a named reason (the worker uses whole
    rows), or logprobs, every parameter's gradient and (MoE) the router metrics within the bar
    of whole rows'. Not measured (an earlier check failed): no result, not held to it."""
    if result is None:
        return True
    value = result.get("value")
    if value is None:
        return False
    if "off" in value:
        return True
    figures = (value["logprobs"], value["gradients"], value.get("router", 0.0))
    return max(figures) <= SHARED_PREFIX_TOLERANCE


def passes(row: dict[str, Any]) -> bool:
    """Every column of an in-matrix row passed."""
    if not row.get("in_matrix") or "export" not in row:
        return False
    values = [v.get("value") for v in row["layouts"].values()] + [row["export"].get("value")]
    if any(v is None or not v <= TOLERANCE for v in values):
        return False
    shared = row.get("shared_prefix", {}).values()
    return step_passes(row["grpo_step"].get("value")) and all(map(shared_prefix_passes, shared))
