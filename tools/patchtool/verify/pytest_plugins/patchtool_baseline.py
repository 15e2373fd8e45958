"""pytest plugin for the regression gate's baseline run: leave out the tests that passed on the
series tree, and say which were left out.

Why: a test that passes with the series cannot be broken by it, whatever it did before, so the
baseline ("before") tree only has to run the tests that did not pass on the series and those
the series tree did not have. Matching is by exact node id; an id written differently is run,
never wrongly left out. Loaded by verify with `-p patchtool_baseline` (this directory on the
state's PYTHONPATH); standard library only, like the rest of tools/.

    PATCHTOOL_BASELINE_SKIP        file: the node ids that passed on the series, one per line
    PATCHTOOL_BASELINE_DESELECTED  file this plugin writes: the collected ids it left out
"""

from __future__ import annotations

import os
from typing import Any

SKIP_VAR = "PATCHTOOL_BASELINE_SKIP"
DESELECTED_VAR = "PATCHTOOL_BASELINE_DESELECTED"


def _read_ids(path: str) -> set[str]:
    with open(path, encoding="utf-8") as handle:
        return {line.rstrip("\n") for line in handle if line.strip()}


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Deselect the items whose node id passed on the series; record them."""
    skip_file, out_file = os.environ.get(SKIP_VAR), os.environ.get(DESELECTED_VAR)
    if not skip_file or not out_file:
        return
    passed = _read_ids(skip_file)
    keep = [item for item in items if item.nodeid not in passed]
    left_out = [item for item in items if item.nodeid in passed]
    with open(out_file, "w", encoding="utf-8") as handle:
        handle.writelines(f"{item.nodeid}\n" for item in left_out)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = keep
