"""Tripwires of the NeMo-RL series: NeMo-RL's real code from 3rdparty/NeMo-RL on sys.path.

NeMo-RL has no offline stand-in (PyPI `nemo-rl` is an empty placeholder), so on a machine
without the checkout every test here is skipped with ONE reason, and the NeMo-RL series
counts as not verified there.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.upstream_tree import upstream_tree

NEMO_RL_ROOT = upstream_tree("NeMo-RL")
NEMO_RL_MISSING = not (NEMO_RL_ROOT / "nemo_rl" / "__init__.py").is_file()
SKIP_REASON = (
    f"NeMo-RL source not present at {NEMO_RL_ROOT} (no offline stand-in exists; "
    "run `git submodule update --init 3rdparty/NeMo-RL`): NeMo-RL series not verified here"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason=SKIP_REASON)
    if not NEMO_RL_MISSING:
        return
    for item in items:
        if here in Path(str(item.path)).parents and item.get_closest_marker("nemo_rl"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def nemo_rl_on_path() -> Iterator[Path]:
    """3rdparty/NeMo-RL first on sys.path (NeMo-RL is never installed here)."""
    root = str(NEMO_RL_ROOT)
    sys.path.insert(0, root)
    try:
        yield NEMO_RL_ROOT
    finally:
        sys.path.remove(root)
