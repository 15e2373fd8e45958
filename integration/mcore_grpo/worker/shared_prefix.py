"""Shared-prefix rows: each group's common prefix forwarded once, its continuations after it.

A GRPO group is G rows that repeat one prompt. Laid out as one row
``[prefix | suffix_1 | ... | suffix_G]``, every suffix token attends the prefix and, causally,
its own suffix, never another suffix; each token keeps the position it has in its own row, so
rotary embeddings (megatron-core with `rope_from_position_ids`, patches/Megatron-LM/
rope-from-position-ids.patch) and learned absolute ones see what they see unshared. Logits are
then those of the unshared rows (Prefix Grouper, arXiv 2506.05433): the logprobs equal, and the
prefix's gradient is the sum its copies would get.

The packed rows hold real tokens only (padding is dropped; positions say where each token was)
and are described to megatron-core by segments, not a mask (`SharedPrefixParams`,
patches/Megatron-LM/shared-prefix-attention.patch): the prefix a root, each suffix continuing
it. Attention then costs P^2/2 + G*C*(P + C/2) query-key pairs, never more than the rows apart,
on the local backend (torch SDPA, CPU and CUDA) and on Transformer Engine (THD).

Groups are found in the data, not assumed: consecutive rows are compared column by column
(tokens and padding alike), so a microbatch that splits a group, or rows that share nothing,
stay exact and simply share less. A row that would shrink its group's prefix joins only where
one packed row still costs less than the group and the row apart (`FlopCost`).
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from typing import Any

import torch

from mcore_grpo.worker.forward import gpt_module, has_recurrent_layers
from mcore_grpo.worker.layer_types import optional_class, recurrent_layer_types
from mcore_grpo.worker.packed_rows import (
    Group,
    PackedRows,
    RealTokens,
    packed_logprobs,
    row_ends,
)
from mcore_grpo.worker.shared_prefix_moe import moe_reason

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlopCost:
    """Relative forward cost: `per_token` for a token's linear layers and LM head, `per_score`
    for one query-key pair of attention (summed over layers). Only their ratio matters."""

    per_token: float
    per_score: float

    @classmethod
    def of(cls, model: torch.nn.Module) -> FlopCost:
        """From the model's shape: 24 h^2 per token and layer (QKV, output projection and a
        4h MLP), 2 h V for the LM head, 4 h per score and layer (QK^T and AV)."""
        gpt = gpt_module(model)
        layers, hidden = gpt.config.num_layers, gpt.config.hidden_size
        vocab = int(gpt.vocab_size)
        return cls(
            per_token=layers * 24 * hidden * hidden + 2 * hidden * vocab,
            per_score=layers * 4 * hidden,
        )

    def packed(self, prefix: int, suffixes: list[int]) -> float:
        """Cost of one packed row: a prefix of `prefix` real tokens attended causally, then each
        suffix over the prefix and, causally, itself."""
        tokens = prefix + sum(suffixes)
        scores = prefix * prefix / 2 + sum(n * (prefix + n / 2) for n in suffixes)
        return self.per_token * tokens + self.per_score * scores


RECURRENT_REASON = "its Mamba / gated delta net layers carry a state along the row, across suffixes"
# TransformerConfig.experimental_attention_variant values with a gated delta net (1) layer
GATED_DELTA_NET_VARIANTS = ("gdn", "gated_delta_net")
DSA_REASON = (
    "its sparse attention (DSA) bounds a packed query's keys by one [start, end) interval, "
    "where a shared-prefix segment sees two (its prompt, its own tokens), and its indexer "
    "rotates by row index"
)
MAMBA_SYMBOL, GATED_DELTA_NET_SYMBOL = "M", "G"  # megatron-core's hybrid layer pattern


# Core attention classes whose forward takes `SharedPrefixParams` where they have a
# `_shared_prefix_forward`: megatron-core's local attention (and our SDPA subclass of it) and
# Transformer Engine's (shared-prefix-attention.patch), Gemma 2's soft-capping ones
# (patches/Megatron-Bridge/gemma2-shared-prefix.patch). A model's subclass that keeps their
# forward (Gemma 3's, a per-layer window) takes them too.
SEGMENT_ATTENTION = (
    "DotProductAttention",
    "SDPADotProductAttention",
    "TEDotProductAttention",
    "Gemma2DotProductAttention",
    "Gemma2FlexDotProductAttention",
)


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """Why shared-prefix rows would not give this model's unshared logits, or None if they do."""
    if has_recurrent_layers(model) and (reason := _recurrent_reason(model)) is not None:
        return reason
    gpt = gpt_module(model)
    reason = config_reason(gpt.config, gpt.position_embedding_type)
    if reason is not None:
        return reason
    if "packed_seq_params" not in inspect.signature(type(gpt).forward).parameters:
        # A model class of its own (Falcon-H1's) whose forward does not pass segments on.
        return f"its model ({type(gpt).__name__}) takes no packed_seq_params to its layers"
    rotary = getattr(gpt, "rotary_pos_emb", None)
    multi_latent = getattr(gpt.config, "multi_latent_attention", False)
    if (
        gpt.position_embedding_type == "rope"
        and not multi_latent
        and not _overridden_together(type(rotary), "forward", "get_emb_at_positions")
    ):
        # A model's own rotary class (Gemma 3's and Gemma 4's without
        # patches/Megatron-Bridge/gemma-rope-at-positions.patch) whose tables
        # rope-from-position-ids.patch does not reach.
        return f"its rotary embedding ({type(rotary).__name__}) rotates by sequence index only"
    return attention_reason(model)


def _overridden_together(cls: type, method: str, counterpart: str) -> bool:
    """Whether `cls` defines `counterpart` where it defines `method` or below: a subclass that
    overrides `forward` (another table) but inherits `get_emb_at_positions` would be read at
    its base's table."""
    defines = next((c for c in cls.__mro__ if counterpart in vars(c)), None)
    if defines is None:
        return False
    overrides = next((c for c in cls.__mro__ if method in vars(c)), None)
    return overrides is None or issubclass(defines, overrides)


def attention_reason(model: torch.nn.Module) -> str | None:
    """Why the model's attention modules would not attend segments exactly, or None."""
    windowed = getattr(gpt_module(model).config, "window_size", None) is not None
    for module in model.modules():
        attention = getattr(module, "core_attention", None)
        if attention is None:
            continue
        name = type(attention).__name__
        forward = next(c for c in type(attention).__mro__ if "forward" in vars(c)).__name__
        if forward not in SEGMENT_ATTENTION or not hasattr(attention, "_shared_prefix_forward"):
            return (
                f"its attention ({name}) takes no shared-prefix segments; "
                "megatron-core's local and Transformer Engine attention do"
            )
        if forward.startswith("Gemma2") and not _segment_attention_takes("score_transform"):
            return (
                f"its attention ({name}) soft-caps its scores, which megatron-core's segment "
                "attention takes only with patches/Megatron-LM/shared-prefix-score-transform.patch"
            )
        if windowed and forward == "TEDotProductAttention":
            return (
                "Transformer Engine's sliding window over segments is unchecked: its test "
                "(test_transformer_engine_matches_the_local_attention, marked gpu) has not run"
            )
    return None


def _recurrent_reason(model: torch.nn.Module) -> str | None:
    """Why the model's recurrent layers would not start each continuation from its prefix's
    state, or None: Mamba-2 mixers do with patches/Megatron-LM/mamba-shared-prefix-state.patch,
    gated delta nets with gdn-shared-prefix-state.patch; gated delta net 2 never yet."""
    kinds = recurrent_layer_types()
    for module in model.modules():
        if isinstance(module, kinds) and not _takes_segments(module):
            return f"{RECURRENT_REASON} ({type(module).__name__} takes no segments)"
    return None


def _takes_segments(layer: torch.nn.Module) -> bool:
    """Whether a recurrent layer starts each shared-prefix segment from its parent's state."""
    mamba = optional_class("megatron.core.ssm.mamba_mixer", "MambaMixer")
    gdn = optional_class("megatron.core.ssm.gated_delta_net", "GatedDeltaNet")
    if mamba is not None and isinstance(layer, mamba):
        return mamba_segments_available()
    return gdn is not None and isinstance(layer, gdn) and gated_delta_net_segments_available()


def mamba_segments_available() -> bool:
    """Whether megatron-core's Mamba-2 mixer starts each shared-prefix segment from its parent's
    convolution and SSM state (patches/Megatron-LM/mamba-shared-prefix-state.patch applied)."""
    mamba = optional_class("megatron.core.ssm.mamba_mixer", "MambaMixer")
    return mamba is not None and hasattr(mamba, "_shared_prefix_ssm")


def gated_delta_net_segments_available() -> bool:
    """Whether megatron-core's gated delta net starts each shared-prefix segment from its
    parent's state (patches/Megatron-LM/gdn-shared-prefix-state.patch applied)."""
    gdn = optional_class("megatron.core.ssm.gated_delta_net", "GatedDeltaNet")
    return gdn is not None and hasattr(gdn, "_shared_prefix_forward")


def segment_attention_available() -> bool:
    """Whether megatron-core attends `SharedPrefixParams` (patches/Megatron-LM/
    shared-prefix-attention.patch applied)."""
    try:
        import megatron.core.transformer.shared_prefix_attention  # noqa: F401
    except ImportError:
        return False
    return True


def config_reason(config: Any, position_embedding_type: str) -> str | None:
    """What in a model's config alone rules shared-prefix rows out, or None: a megatron-core
    `TransformerConfig` or a Megatron-Bridge provider (one, with its hybrid layer pattern), so
    an explicit request is refused before any model is built. The built model is checked again
    (`unsupported_reason`: its layers and its attention modules)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    pattern = getattr(config, "hybrid_layer_pattern", None) or getattr(
        config, "hybrid_override_pattern", None
    )
    variant = getattr(config, "experimental_attention_variant", None)
    gated_delta_net = variant in GATED_DELTA_NET_VARIANTS or GATED_DELTA_NET_SYMBOL in (
        pattern or ""
    )
    if variant == "gdn2" or (gated_delta_net and not gated_delta_net_segments_available()):
        return f"{RECURRENT_REASON} (gated delta net {variant or 'G'} takes no segments)"
    if MAMBA_SYMBOL in (pattern or "") and not mamba_segments_available():
        return f"{RECURRENT_REASON} (Mamba takes no segments)"
    if variant == "dsa":
        return DSA_REASON
    if not segment_attention_available():
        return (
            "megatron-core attends no shared-prefix segments: apply "
            "patches/Megatron-LM/shared-prefix-attention.patch (tools/apply_patches.sh)"
        )
    kind = position_embedding_type
    multi_latent = getattr(config, "multi_latent_attention", False)
    if multi_latent and (reason := _mla_reason(config)) is not None:
        return reason
    if (
        kind == "rope"
        and not multi_latent
        and "rope_from_position_ids" not in TransformerConfig.__dataclass_fields__
    ):
        return (
            "megatron-core rotates by sequence index: apply "
            "patches/Megatron-LM/rope-from-position-ids.patch (tools/apply_patches.sh)"
        )
    if kind == "yarn" and not multi_latent and not yarn_from_position_ids_available():
        return (
            "megatron-core rotates YaRN RoPE by sequence index: apply "
            "patches/Megatron-LM/yarn-from-position-ids.patch (tools/apply_patches.sh)"
        )
    if kind not in ("rope", "yarn", "learned_absolute", "none") and not multi_latent:
        return f"position_embedding_type {kind!r} is not taken from position_ids"
    if getattr(config, "softmax_type", "vanilla") != "vanilla" and not _segment_attention_takes(
        "softmax_offset"
    ):
        return (
            f"its attention sinks (softmax_type {config.softmax_type!r}) are refused over "
            "segments: apply patches/Megatron-LM/shared-prefix-softmax-offset.patch "
            "(tools/apply_patches.sh)"
        )
    if (getattr(config, "context_parallel_size", 1) or 1) > 1:
        return "context parallelism would split the segments over ranks, which they do not follow"
    if getattr(config, "num_moe_experts", None):
        return moe_reason(config)
    return None


def _mla_reason(config: Any) -> str | None:
    """Multi-latent attention rotates its queries and keys itself (its own rope or yarn table),
    where no position ids reach: exact only where it reads each token's position from the
    segments (patches/Megatron-LM/mla-shared-prefix-positions.patch), unfused."""
    from megatron.core.transformer.shared_prefix_attention import SharedPrefixParams

    if not hasattr(SharedPrefixParams, "positions"):
        return (
            "multi-latent attention rotates inside its attention, by sequence index: apply "
            "patches/Megatron-LM/mla-shared-prefix-positions.patch (tools/apply_patches.sh)"
        )
    if getattr(config, "apply_rope_fusion", False):
        return "multi-latent attention's fused rope rotates by sequence index (apply_rope_fusion)"
    return None


def yarn_from_position_ids_available() -> bool:
    """Whether megatron-core's YaRN RoPE is read at given positions (patches/Megatron-LM/
    yarn-from-position-ids.patch applied; without it the inherited method reads the base
    class's frequencies)."""
    from megatron.core.models.common.embeddings.yarn_rotary_pos_embedding import (
        YarnRotaryEmbedding,
    )

    return "get_emb_at_positions" in vars(YarnRotaryEmbedding)


def _segment_attention_takes(argument: str) -> bool:
    """Whether megatron-core's segment attention takes `argument`: 'softmax_offset' (attention
    sinks, patches/Megatron-LM/shared-prefix-softmax-offset.patch) or 'score_transform' (Gemma
    2's soft-capping, shared-prefix-score-transform.patch)."""
    from megatron.core.transformer.shared_prefix_attention import shared_prefix_attention

    return argument in inspect.signature(shared_prefix_attention).parameters


def enable(model: torch.nn.Module) -> None:
    """Make the model rotate by the positions it is given (a no-op for learned positions and
    for multi-latent attention, which reads them from the segments)."""
    gpt = gpt_module(model)
    if gpt.position_embedding_type in ("rope", "yarn") and not gpt.config.multi_latent_attention:
        gpt.config.rope_from_position_ids = True


def resolve(requested: bool | None, model: torch.nn.Module) -> bool:
    """Whether `model`'s logprob and training forwards use shared-prefix rows
    (`WorkerConfig.shared_prefix`); turns them on in the model when they do."""
    if requested is False:
        return False
    reason = unsupported_reason(model)
    if reason is None:
        enable(model)
        return True
    if requested:
        raise _refusal(reason)
    log.warning(
        "mcore_grpo.worker: shared-prefix rows are off for this model (%s): every row is "
        "forwarded whole",
        reason,
    )
    return False


def refuse_before_build(requested: bool | None, config: Any, position_embedding_type: str) -> None:
    """Raise for an explicit `shared_prefix=True` that the model's config already rules out,
    before the model is built; unset or False: nothing."""
    if not requested:
        return
    reason = config_reason(config, position_embedding_type)
    if reason is not None:
        raise _refusal(reason)


def _refusal(reason: str) -> ValueError:
    return ValueError(
        f"WorkerConfig.shared_prefix=True, but shared-prefix rows would change this model's "
        f"logits: {reason}. Set it to None (on wherever exact) or False."
    )


def common_prefixes(input_ids: torch.Tensor, valid: torch.Tensor, ends: list[int]) -> list[int]:
    """[B-1]: how many leading columns row i+1 shares with row i (tokens and padding), at most
    up to the later of the two rows' ends (identical rows share no trailing padding)."""
    same = (input_ids[1:] == input_ids[:-1]) & (valid[1:] == valid[:-1])
    counts = same.long().cumprod(dim=1).sum(dim=1).tolist()
    return [min(n, max(a, b)) for n, a, b in zip(counts, ends[:-1], ends[1:], strict=True)]


def plan_groups(
    input_ids: torch.Tensor, valid: torch.Tensor, cost: FlopCost
) -> tuple[list[Group], list[int]]:
    """Greedy left to right: a row joins the group before it when one packed row costs less
    than that group and the row apart (a row that shares less than the group's prefix shrinks
    it for every member); otherwise it starts a group. Also returns `row_ends`."""
    ends = row_ends(valid)
    shared = common_prefixes(input_ids, valid, ends)
    real = RealTokens(valid)

    def group_cost(group: Group) -> float:
        return cost.packed(*real.of_group(group, ends))

    groups: list[Group] = []
    for row, end in enumerate(ends):
        alone = Group(row, 1, end)
        if groups:
            last = groups[-1]
            prefix = min(last.prefix, shared[row - 1]) if last.size > 1 else shared[row - 1]
            joined = Group(last.first, last.size + 1, prefix)
            shares = real.between(row, 0, prefix) > 0
            if shares and group_cost(joined) < group_cost(last) + group_cost(alone):
                groups[-1] = joined
                continue
        groups.append(alone)
    return groups, ends


def shared_prefix_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    valid: torch.Tensor,
    vocab_size: int,
    temperature: float = 1.0,
    multiple: int = 1,
    scored: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, S-1] next-token logprobs of the [B, S] rows, forwarded as shared-prefix rows, and the
    logits the forward produced (`packed_rows.packed_logprobs`: `scored`, `multiple`). The
    caller checked `unsupported_reason`."""
    groups, ends = plan_groups(input_ids, valid.bool(), FlopCost.of(model))
    packed = PackedRows.build(input_ids, valid, groups, ends, multiple)
    return packed_logprobs(model, packed, input_ids, vocab_size, temperature, scored)
