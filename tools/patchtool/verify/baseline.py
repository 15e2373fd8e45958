"""The regression gate's baseline run, reduced to the tests whose "before" can matter.

A test is broken by the series when it passed before and does not pass after. A test that
passes on the series tree is therefore never broken, whatever it did before: the baseline
("before") tree runs only the rest, the tests that did not pass on the series and those the
series tree lacks (gone), once the series run has said which they are. The passing ones are
still collected there, so a test the series removed is still seen as gone; the plugin
(pytest_plugins/patchtool_baseline.py) records them as not run. What is lost is only the count
of tests the series fixed; `verify --full-baseline` (and `--record`) runs the whole baseline.
"""

from __future__ import annotations

import os
from pathlib import Path

from .pytest_plugins.patchtool_baseline import DESELECTED_VAR, SKIP_VAR
from .pytest_run import NOT_RUN, PASSED, Outcomes

PLUGIN = "patchtool_baseline"  # loaded by this name, its directory on the state's path
PLUGIN_DIR = Path(__file__).resolve().parent / "pytest_plugins"
LEFT_OUT = "passed on the series: not run on the baseline (it cannot be broken)"


def passed_on_series(after: Outcomes) -> frozenset[str]:
    """The nodes the baseline may leave out: those that passed on the series. An invalid
    series run leaves none out (nothing it says can be trusted)."""
    if after.invalid:
        return frozenset()
    return frozenset(node for node, (outcome, _) in after.by_node.items() if outcome == PASSED)


def baseline_env(
    skip: frozenset[str], scratch: Path, name: str, env: dict[str, str]
) -> dict[str, str]:
    """The variables of a reduced baseline run: the plugin on the path, its two files."""
    skip_file = scratch / f"{name}.baseline-skip"
    skip_file.write_text("".join(f"{node}\n" for node in sorted(skip)))
    path = os.pathsep.join(filter(None, [str(PLUGIN_DIR), env.get("PYTHONPATH")]))
    return {
        "PYTHONPATH": path,
        SKIP_VAR: str(skip_file),
        DESELECTED_VAR: str(scratch / f"{name}.baseline-left-out"),
    }


def read_left_out(outcomes: Outcomes, env: dict[str, str]) -> None:
    """Add the nodes the plugin left out to `outcomes`, as not run."""
    path = Path(env[DESELECTED_VAR])
    if not path.is_file():
        return
    for node in path.read_text().splitlines():
        if node:
            outcomes.by_node.setdefault(node, (NOT_RUN, LEFT_OUT))
