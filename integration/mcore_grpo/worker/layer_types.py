"""megatron-core layer classes the worker asks about by type, where a release may lack them.

Why: the pins carry classes a megatron-core release does not (gated delta net 2 arrived after
0.19.2, the sdist `tools/apply_patches.sh` falls back to where only the package index is
reachable). A model of a release cannot hold a layer the release lacks, so a missing class is
simply not one of the kinds asked about: the worker runs the same on either tree.
"""

from __future__ import annotations

import importlib


def optional_class(module: str, name: str) -> type | None:
    """`module.name`, or None when this megatron-core lacks the module or the class."""
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    return found if isinstance(found, type) else None


def recurrent_layer_types() -> tuple[type, ...]:
    """The layers with a recurrent state (Mamba-2, gated delta net 1 and 2) this release has."""
    kinds = (
        optional_class("megatron.core.ssm.mamba_mixer", "MambaMixer"),
        optional_class("megatron.core.ssm.gated_delta_net", "GatedDeltaNet"),
        optional_class("megatron.core.ssm.gated_delta_net", "GatedDeltaNet2"),
    )
    return tuple(kind for kind in kinds if kind is not None)


def stateless_decode_types() -> tuple[type, ...]:
    """The layers that keep no inference state (gated delta net 2), where this release has them."""
    kind = optional_class("megatron.core.ssm.gated_delta_net", "GatedDeltaNet2")
    return (kind,) if kind is not None else ()
