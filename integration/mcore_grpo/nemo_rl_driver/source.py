"""THE one place NeMo-RL's source goes on ``sys.path`` (NeMo-RL is never installed here).

NeMo-RL requires Python >= 3.13.14, so it cannot be a distribution of this project's 3.12
environment; its runtime dependencies are the ``nemo-rl`` dependency group of pyproject.toml
and its source is the patched checkout ``3rdparty/NeMo-RL`` (``tools/apply_patches.sh``), or
the tree named by ``MCORE_GRPO_NEMO_RL_SOURCE``. Every module of `mcore_grpo.nemo_rl_driver`
that imports ``nemo_rl`` calls `ensure_on_path()` first, in the driver and in every Ray actor.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcore_grpo.nemo_rl_driver.automodel_compat import prepare_automodel

SOURCE_ENV = "MCORE_GRPO_NEMO_RL_SOURCE"
# integration/mcore_grpo/nemo_rl_driver/source.py -> the repository root.
REPO_ROOT = Path(__file__).resolve().parents[3]


class NemoRLUnavailable(RuntimeError):
    """NeMo-RL's source (or its dependency group) is not on this machine."""


def source_root() -> Path:
    """Where NeMo-RL's source tree is expected (it may be absent)."""
    override = os.environ.get(SOURCE_ENV)
    return Path(override) if override else REPO_ROOT / "3rdparty" / "NeMo-RL"


def is_available() -> bool:
    """Whether the source tree holds NeMo-RL's package."""
    return (source_root() / "nemo_rl" / "__init__.py").is_file()


def ensure_on_path() -> Path:
    """Append NeMo-RL's source root to ``sys.path`` once; raise if the tree is absent.

    Appended, not prepended: NeMo-RL's top-level ``tests`` package must not shadow this
    project's. Also sets ``RAY_ENABLE_UV_RUN_RUNTIME_ENV=0`` before ray is imported (see
    `mcore_grpo.grpo.runner`: actors run this interpreter, not a nested ``uv run``), and imports
    nemo_automodel's LoRA kernel module the way triton 3.9 allows (`automodel_compat`).
    """
    root = source_root()
    if not is_available():
        raise NemoRLUnavailable(
            f"NeMo-RL source not found at {root} (no nemo_rl/__init__.py): run "
            "`tools/apply_patches.sh` (or `git submodule update --init 3rdparty/NeMo-RL`), or "
            f"point {SOURCE_ENV} at a NeMo-RL checkout"
        )
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    if str(root) not in sys.path:
        sys.path.append(str(root))
    prepare_automodel()
    return root


def check_importable() -> None:
    """Import NeMo-RL's GRPO module; a missing dependency becomes one actionable error."""
    ensure_on_path()
    try:
        import nemo_rl.algorithms.grpo  # noqa: F401  (the import is the check)
    except ImportError as err:
        raise NemoRLUnavailable(
            f"NeMo-RL's source is at {source_root()} but importing nemo_rl.algorithms.grpo "
            f"failed ({err}); install its dependency group: `uv sync --group nemo-rl`"
        ) from err
