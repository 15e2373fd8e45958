"""Megatron-Bridge as this environment installs it: one clear line where it is absent.

`uv sync` installs the patched checkout ``3rdparty/Megatron-Bridge`` as the editable
distribution ``megatron-bridge`` (its shim: ``upstream-dists/megatron-bridge``; what it imports
on the path this project uses: the ``megatron-bridge`` dependency group of pyproject.toml). Its
series makes it import and build models without Transformer Engine. Where the checkout was
absent when the environment was synced, the distribution is empty (``0+absent``).
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

# integration/mcore_grpo/worker/bridge_source.py -> the repository root.
REPO_ROOT = Path(__file__).resolve().parents[3]
CHECKOUT = REPO_ROOT / "3rdparty" / "Megatron-Bridge"


class BridgeUnavailable(ImportError):
    """Megatron-Bridge (or a dependency it imports) is not installed in this environment."""


def import_auto_bridge() -> type:
    """`megatron.bridge.AutoBridge`, or one line naming the fix."""
    if find_spec("megatron.bridge") is None:
        raise BridgeUnavailable(
            f"Megatron-Bridge is not installed in this environment ({CHECKOUT} held no checkout "
            "when it was synced): run `tools/apply_patches.sh`, then `uv sync`"
        )
    try:
        from megatron.bridge import AutoBridge
    except ImportError as err:
        raise BridgeUnavailable(
            f"importing Megatron-Bridge failed ({err}): run `tools/apply_patches.sh` (its series "
            "lets Bridge import without Transformer Engine) and `uv sync` (the megatron-bridge "
            "dependency group)"
        ) from err
    return AutoBridge
