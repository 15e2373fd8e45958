"""Where the pinned `transformers` (5.8.1) is not a faithful oracle for an architecture, and
how the matrix runs it instead. Each correction is measured here and is what a later
`transformers` release does; nothing else about the oracle changes.

- GLM-5 (`GlmMoeDsaForCausalLM`): 5.8.1 rotates the main attention's and the indexer's RoPE
  dimensions as halves (`rotate_half`), but GLM-5 checkpoints lay them out in interleaved pairs,
  as DeepSeek's do (`rope_interleave` true in GLM-5.1's and 5.2's config.json,
  `indexer_rope_interleave` true in 5.2's; megatron-core's MLA and mlx-lm rotate pairs).
  transformers fixed both (PR #46372 for the attention, #46842 for the indexer; 5.23.0 calls
  `apply_rotary_pos_emb_interleave` in both places). Measured on the matrix's tiny GLM-5:
  megatron vs 5.8.1 as is 2.7e-03, vs 5.8.1 with pairs rotated 7.1e-05.
- GLM-5 under SDPA: 5.8.1's sparse attention passes its top-k mask as the attention mask, and
  under SDPA the model's causal mask is None, so nothing stops a token attending to later ones
  (eager vs SDPA: 0.48 on the tiny model). The oracle runs eager attention, where the causal
  mask is 4-D and added to the top-k mask.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

# Attention implementation the oracle loads an architecture with (default: transformers').
ATTENTION: dict[str, str] = {"GlmMoeDsaForCausalLM": "eager"}


def interleaved(rotate: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """`rotate` (half-split RoPE of one tensor) applied to dimensions laid out in interleaved
    pairs: (x0, x1), (x2, x3), ... become (x0, x2, ...), (x1, x3, ...) first, which is what
    `apply_rotary_pos_emb_interleave` computes."""

    def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *a: Any, **kw: Any):
        *lead, dim = x.shape
        halves = x.reshape(*lead, dim // 2, 2).transpose(-1, -2).reshape(*lead, dim)
        return rotate(halves, cos, sin, *a, **kw)

    return rotate_pairs


@contextlib.contextmanager
def corrected(arch: str) -> Iterator[None]:
    """The oracle for `arch` with this module's corrections in place, for the block's duration."""
    if arch != "GlmMoeDsaForCausalLM":
        yield
        return
    from transformers.models.glm_moe_dsa import modeling_glm_moe_dsa as glm5

    original = glm5.apply_rotary_pos_emb
    glm5.apply_rotary_pos_emb = interleaved(original)
    try:
        yield
    finally:
        glm5.apply_rotary_pos_emb = original
