"""NeMo-RL as this environment installs it: one clear line where it is absent.

`uv sync` installs the patched checkout ``3rdparty/NeMo-RL`` as the editable distribution
``nemo-rl`` (its shim: ``upstream-dists/nemo-rl``; its runtime dependencies: the ``nemo-rl``
dependency group of pyproject.toml), so ``import nemo_rl`` works in any script of this
environment. Where the checkout was absent when the environment was synced, the distribution is
empty (``0+absent``) and every module of `mcore_grpo.nemo_rl_driver` that imports ``nemo_rl``
calls `require_nemo_rl()` first, in the driver and in every Ray actor, which says so.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

from mcore_grpo.grpo.cluster.ray_import import before_ray_import
from mcore_grpo.grpo.nemo_rl.automodel_compat import prepare_automodel

# integration/mcore_grpo/grpo/nemo_rl/source.py -> the repository root.
REPO_ROOT = Path(__file__).resolve().parents[4]
CHECKOUT = REPO_ROOT / "3rdparty" / "NeMo-RL"


class NemoRLUnavailable(RuntimeError):
    """NeMo-RL (or its dependency group) is not installed in this environment."""


def is_available() -> bool:
    """Whether ``nemo_rl`` is importable here (the installed checkout, or a tree ahead of it on
    PYTHONPATH, as `tools/patches verify` puts one)."""
    spec = find_spec("nemo_rl")
    return spec is not None and spec.origin is not None


def source_root() -> Path:
    """The NeMo-RL tree ``import nemo_rl`` loads (for its files: prompts, configs); the
    checkout it would be installed from where it is not importable."""
    spec = find_spec("nemo_rl")
    if spec is not None and spec.origin is not None:
        return Path(spec.origin).parent.parent
    return CHECKOUT


def require_nemo_rl() -> Path:
    """NeMo-RL's tree, or one line naming the fix. Also turns Ray's `uv run` hook off
    before ray is imported (`mcore_grpo.grpo.cluster.ray_import`), and imports nemo_automodel's LoRA kernel module the way triton 3.9
    allows (`automodel_compat`)."""
    if not is_available():
        raise NemoRLUnavailable(
            f"NeMo-RL is not installed in this environment ({CHECKOUT} held no checkout when "
            "it was synced): run `tools/apply_patches.sh` (or `git submodule update --init "
            "3rdparty/NeMo-RL`), then `uv sync`"
        )
    before_ray_import()
    prepare_automodel()
    return source_root()


def check_importable() -> None:
    """Import NeMo-RL's GRPO module; a missing dependency becomes one actionable error."""
    require_nemo_rl()
    try:
        import nemo_rl.algorithms.grpo  # noqa: F401  (the import is the check)
    except ImportError as err:
        raise NemoRLUnavailable(
            f"NeMo-RL is installed from {source_root()} but importing nemo_rl.algorithms.grpo "
            f"failed ({err}); install its dependency group: `uv sync --group nemo-rl`"
        ) from err
