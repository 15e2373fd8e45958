"""``loss_fn.*``: the GRPO loss's settings (NeMo-RL's `ClippedPGLossConfig` keys and defaults;
the loss itself: `mcore_grpo.grpo.algorithm.loss`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

KL_TYPES = ("k1", "k2", "k3")
LossLevel = Literal["token", "sequence"]


@dataclass(frozen=True)
class ClippedPGLossConfig:
    """The `loss_fn.*` keys of the run config (NeMo-RL names and defaults)."""

    reference_policy_kl_penalty: float = 0.01
    reference_policy_kl_type: str = "k3"
    kl_input_clamp_value: float | None = 20.0
    kl_output_clamp_value: float | None = 10.0
    ratio_clip_min: float = 0.2
    ratio_clip_max: float = 0.2
    ratio_clip_c: float | None = None
    token_level_loss: bool = True

    @property
    def level(self) -> LossLevel:
        """What the loss is averaged over: the valid tokens of the step, or its sequences."""
        return "token" if self.token_level_loss else "sequence"

    def __post_init__(self) -> None:
        if self.reference_policy_kl_type not in KL_TYPES:
            raise ValueError(
                f"loss_fn.reference_policy_kl_type={self.reference_policy_kl_type!r}: "
                f"use one of {', '.join(KL_TYPES)}"
            )
        if self.ratio_clip_c is not None and self.ratio_clip_c <= 1:
            raise ValueError(
                f"loss_fn.ratio_clip_c={self.ratio_clip_c}: dual clipping needs a value > 1 "
                "(usually 3), or null to disable it"
            )
