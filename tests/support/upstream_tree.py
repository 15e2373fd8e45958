"""Where a tripwire test finds its upstream's source tree.

Normally the checkout under 3rdparty/. `tools/patches rebase --tripwires` runs a patch's tests
against a scratch tree of the new base instead (to see whether upstream fixed the bug on its own)
and names that tree in `PATCHTOOL_TREE_<UPSTREAM>` (upper case, `-` as `_`); Python imports follow
through PYTHONPATH, and tests that read upstream files by path use `upstream_tree()`.
"""

from __future__ import annotations

import os
from pathlib import Path

from tools.patchtool.verify.trees import tree_env_var

REPO_ROOT = Path(__file__).resolve().parents[2]


def upstream_tree(upstream: str) -> Path:
    """The source tree of `upstream` (e.g. "Megatron-Bridge") the tests should exercise."""
    override = os.environ.get(tree_env_var(upstream))
    return Path(override) if override else REPO_ROOT / "3rdparty" / upstream
