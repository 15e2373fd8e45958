"""What in a mixture-of-experts config rules shared-prefix rows out (`shared_prefix`'s
`config_reason` asks for MoE models).

Routing is per token, so an MoE layer's outputs are exact over shared rows; what sees the
whole batch (the router's losses, the expert bias's counts, a capacity) is exact only where
megatron-core counts each shared token for the samples it stands for, and where the ranks of
sequence parallelism, which cut shared and whole rows differently, reduce it over all of them.
"""

from __future__ import annotations

import inspect
from typing import Any


def _balancing_coefficients(config: Any) -> dict[str, float]:
    """The router's load-balancing types and their coefficients (megatron-core takes one of
    each, or parallel lists)."""
    types = getattr(config, "moe_router_load_balancing_type", "aux_loss")
    coefficients = getattr(config, "moe_aux_loss_coeff", 0.0)
    types = types if isinstance(types, (list, tuple)) else [types]
    if not isinstance(coefficients, (list, tuple)):
        coefficients = [coefficients] * len(types)
    return {t: float(c or 0.0) for t, c in zip(types, coefficients, strict=True)}


def _sequence_parallel_reason(config: Any) -> str | None:
    """Under sequence parallelism (MoE at TP > 1) each rank routes its slice of the columns,
    and the shared and whole rows are cut differently. Measured in the model matrix's
    layouts (docs/shared-prefix.md): the z-loss is exact only as the mean over the ranks'
    tokens (patches/Megatron-LM/moe-z-loss-over-ranks.patch); the sequence-level loss's
    gradient is not, in megatron-core itself."""
    from megatron.core.transformer.moe.moe_utils import z_loss_func

    if _balancing_coefficients(config).get("seq_aux_loss"):
        return (
            "its sequence-level auxiliary loss (seq_aux_loss) under sequence parallelism: "
            "megatron-core's gradient of it there differs between shared and whole rows"
        )
    z_loss = getattr(config, "moe_z_loss_coeff", None)
    if z_loss and "tokens_per_rank" not in inspect.signature(z_loss_func).parameters:
        return (
            "its router z-loss under sequence parallelism averages each rank's mean: apply "
            "patches/Megatron-LM/moe-z-loss-over-ranks.patch (tools/apply_patches.sh)"
        )
    return None


def moe_reason(config: Any) -> str | None:
    """Routing is per token, so an MoE layer's outputs are exact over shared rows; what sees the
    whole batch is exact only with megatron-core's token sequences (patches/Megatron-LM/
    shared-prefix-moe-token-counts.patch): the auxiliary and z losses and the expert bias's
    counts count a shared prompt token once per sample, and the sequence-level loss sums each
    sample's segments. Never exact: a capacity, which drops tokens by the packed batch's
    load."""
    if getattr(config, "moe_expert_capacity_factor", None) is not None:
        return "its experts' capacity drops tokens by the load of the whole batch"
    if getattr(config, "sequence_parallel", False) and (
        reason := _sequence_parallel_reason(config)
    ):
        return reason
    if token_sequences_available():
        return None
    coefficients = {
        "moe_aux_loss_coeff": getattr(config, "moe_aux_loss_coeff", 0.0),
        "moe_z_loss_coeff": getattr(config, "moe_z_loss_coeff", None),
    }
    for name, value in coefficients.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(v for v in values):
            return (
                f"its router's auxiliary loss ({name}={value}) counts a shared prompt token once "
                "instead of once per sample: apply patches/Megatron-LM/"
                "shared-prefix-moe-token-counts.patch (tools/apply_patches.sh)"
            )
    return None


def token_sequences_available() -> bool:
    """Whether megatron-core's MoE routers count a shared-prefix token once per sample holding
    it (patches/Megatron-LM/shared-prefix-moe-token-counts.patch applied)."""
    from megatron.core.transformer.shared_prefix_attention import SharedPrefixParams

    return hasattr(SharedPrefixParams, "token_sequences")
