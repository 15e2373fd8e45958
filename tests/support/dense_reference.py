"""The whole-row forward over a dense causal + key-padding mask: the oracle of the tests.

The worker forwards rows packed (`worker/packed_rows.py`: real tokens only, no mask); tests
compare it, and everything built on it, with the plain megatron-core forward of the rows as
they are laid out, each padded row given its [S, S] mask, as every run did before the packing.
A model with recurrent layers (which take no padding mask) sees each row left-aligned, as it
did then.
"""

from __future__ import annotations

import torch
from mcore_grpo.worker.forward import (
    has_recurrent_layers,
    leading_pads,
    model_logits,
    roll_rows,
    token_positions,
)


def dense_mask(valid: torch.Tensor) -> torch.Tensor:
    """[B, 1, S, S] bool, True = masked: causal plus key padding (megatron-core's local
    attention uses a given mask as-is, so both parts are needed)."""
    valid = valid.bool()
    seq = valid.shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=valid.device).triu(1)
    return causal[None, None, :, :] | ~valid[:, None, None, :]


def masked_logits(model: torch.nn.Module, input_ids: torch.Tensor, valid: torch.Tensor):
    """[B, S, V] fp32 logits of the rows as laid out, over `dense_mask`, positions counting
    real tokens."""
    return model_logits(model, input_ids, token_positions(valid.bool()), dense_mask(valid))


def reference_logits(
    model: torch.nn.Module, input_ids: torch.Tensor, valid: torch.Tensor
) -> torch.Tensor:
    """[B, S, V] fp32 logits of the (possibly left-) padded rows, gathered across TP ranks;
    rows of a model with recurrent layers left-aligned for the forward and put back."""
    if has_recurrent_layers(model):
        shifts = leading_pads(valid)
        if bool(shifts.any()):
            aligned = masked_logits(model, roll_rows(input_ids, shifts), roll_rows(valid, shifts))
            return roll_rows(aligned, -shifts)
    return masked_logits(model, input_ids, valid)
