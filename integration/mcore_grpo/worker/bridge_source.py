"""THE one place Megatron-Bridge's source goes on ``sys.path`` (Bridge is never installed here).

Bridge's pyproject requires ~30 packages, many CUDA-only (flashinfer, nvidia-resiliency-ext,
transformer-engine extras), so it is not a distribution of this environment; what it imports
on the path this project uses is the ``megatron-bridge`` dependency group of pyproject.toml, and
its source is the patched checkout ``3rdparty/Megatron-Bridge`` (``tools/apply_patches.sh``; its
series makes it import and build models without Transformer Engine), or the tree named by
``MCORE_GRPO_BRIDGE_SOURCE``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SOURCE_ENV = "MCORE_GRPO_BRIDGE_SOURCE"
# integration/mcore_grpo/worker/bridge_source.py -> the repository root.
REPO_ROOT = Path(__file__).resolve().parents[3]


class BridgeUnavailable(ImportError):
    """Megatron-Bridge's source (or a dependency it imports) is not on this machine."""


def source_root() -> Path:
    """Bridge's checkout (its package lives under ``src/``); it may be absent."""
    override = os.environ.get(SOURCE_ENV)
    return Path(override) if override else REPO_ROOT / "3rdparty" / "Megatron-Bridge"


def import_auto_bridge() -> type:
    """`megatron.bridge.AutoBridge`, its source put on ``sys.path`` first; one clear error."""
    src = source_root() / "src"
    if not (src / "megatron" / "bridge" / "__init__.py").is_file():
        raise BridgeUnavailable(
            f"Megatron-Bridge source not found at {src} (no megatron/bridge/__init__.py): run "
            f"`tools/apply_patches.sh`, or point {SOURCE_ENV} at a Megatron-Bridge checkout"
        )
    if str(src) not in sys.path:
        sys.path.append(str(src))
    try:
        from megatron.bridge import AutoBridge
    except ImportError as err:
        raise BridgeUnavailable(
            f"importing Megatron-Bridge from {src} failed ({err}): run `tools/apply_patches.sh` "
            "(its series lets Bridge import without Transformer Engine) and `uv sync` (the "
            "megatron-bridge dependency group)"
        ) from err
    return AutoBridge
