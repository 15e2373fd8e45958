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

import logging
from dataclasses import dataclass
from typing import Any

import torch

from mcore_grpo.worker.forward import (
    TargetLogprob,
    check_targets,
    gpt_module,
    has_recurrent_layers,
    model_logits,
    token_positions,
)

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
# TransformerConfig.experimental_attention_variant values with a recurrent layer
RECURRENT_VARIANTS = ("gdn", "gdn2", "gated_delta_net")
RECURRENT_SYMBOLS = "MG"  # megatron-core's hybrid layer pattern: Mamba, gated delta net


# Core attention classes that take `SharedPrefixParams` (shared-prefix-attention.patch):
# megatron-core's local attention (and our SDPA subclass of it), Transformer Engine's.
SEGMENT_ATTENTION = ("DotProductAttention", "SDPADotProductAttention", "TEDotProductAttention")


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """Why shared-prefix rows would not give this model's unshared logits, or None if they do."""
    if has_recurrent_layers(model):
        return RECURRENT_REASON
    gpt = gpt_module(model)
    reason = config_reason(gpt.config, gpt.position_embedding_type)
    if reason is not None:
        return reason
    for module in model.modules():
        attention = getattr(module, "core_attention", None)
        if attention is not None and type(attention).__name__ not in SEGMENT_ATTENTION:
            return (
                f"its attention ({type(attention).__name__}) takes no shared-prefix segments; "
                "megatron-core's local and Transformer Engine attention do"
            )
    return None


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
    if variant in RECURRENT_VARIANTS or any(c in (pattern or "") for c in RECURRENT_SYMBOLS):
        return RECURRENT_REASON
    if variant == "dsa":
        return "its sparse attention (DSA) picks keys by its own indexer, which takes no mask"
    if getattr(config, "multi_latent_attention", False):
        return "multi-latent attention rotates inside its attention, by sequence index"
    if not segment_attention_available():
        return (
            "megatron-core attends no shared-prefix segments: apply "
            "patches/Megatron-LM/shared-prefix-attention.patch (tools/apply_patches.sh)"
        )
    kind = position_embedding_type
    if kind == "rope" and "rope_from_position_ids" not in TransformerConfig.__dataclass_fields__:
        return (
            "megatron-core rotates by sequence index: apply "
            "patches/Megatron-LM/rope-from-position-ids.patch (tools/apply_patches.sh)"
        )
    if kind not in ("rope", "learned_absolute"):
        return f"position_embedding_type {kind!r} is not taken from position_ids"
    if (getattr(config, "context_parallel_size", 1) or 1) > 1:
        return "context parallelism would split the segments over ranks, which they do not follow"
    if getattr(config, "window_size", None) is not None:
        return "its sliding windows count distance by index in the row"
    if getattr(config, "num_moe_experts", None):
        return _moe_reason(config)
    return None


def _moe_reason(config: Any) -> str | None:
    """Routing is per token, so an MoE layer's outputs are exact over shared rows; what sees the
    whole batch is not: the auxiliary losses average over the routed tokens (a shared prompt
    counts once instead of once per sample) and a capacity drops tokens by the batch's load."""
    if getattr(config, "moe_expert_capacity_factor", None) is not None:
        return "its experts' capacity drops tokens by the load of the whole batch"
    coefficients = {
        "moe_aux_loss_coeff": getattr(config, "moe_aux_loss_coeff", 0.0),
        "moe_z_loss_coeff": getattr(config, "moe_z_loss_coeff", None),
    }
    for name, value in coefficients.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(v for v in values):
            return (
                f"its router's auxiliary loss ({name}={value}) averages over the routed tokens, "
                "and shared rows route each prompt once instead of once per sample"
            )
    return None


def enable(model: torch.nn.Module) -> None:
    """Make the model rotate by the positions it is given (a no-op for learned positions)."""
    gpt = gpt_module(model)
    if gpt.position_embedding_type == "rope":
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


def row_ends(valid: torch.Tensor) -> list[int]:
    """[B]: one past each row's last real token (0 for a row without one)."""
    columns = torch.arange(1, valid.shape[1] + 1, device=valid.device)
    return (valid.long() * columns).max(dim=1).values.tolist()


@dataclass(frozen=True)
class Group:
    """Consecutive rows `first .. first + size - 1` sharing their first `prefix` columns."""

    first: int
    size: int
    prefix: int

    @property
    def rows(self) -> range:
        return range(self.first, self.first + self.size)


class RealTokens:
    """How many real tokens each row holds in a span of columns (cumulative counts, on the
    host: the planner asks for many spans)."""

    def __init__(self, valid: torch.Tensor) -> None:
        counts = torch.nn.functional.pad(valid.long().cumsum(dim=1), (1, 0))
        self._counts: list[list[int]] = counts.tolist()

    def between(self, row: int, start: int, end: int) -> int:
        """Real tokens of `row` in columns start .. end - 1."""
        return self._counts[row][max(end, start)] - self._counts[row][start]

    def of_group(self, group: Group, ends: list[int]) -> tuple[int, list[int]]:
        """Real tokens of the group's prefix, and of each member's suffix after it."""
        prefix = self.between(group.first, 0, group.prefix)
        suffixes = [self.between(r, group.prefix, ends[r]) for r in group.rows]
        return prefix, suffixes

    def packed_length(self, group: Group, ends: list[int]) -> int:
        """Columns of the group's packed row: its real tokens."""
        prefix, suffixes = self.of_group(group, ends)
        return prefix + sum(suffixes)


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


@dataclass(frozen=True)
class SharedPrefixLayout:
    """The packed rows and where each original row's predictions come from in them.

    input_ids, positions: [R, T], real tokens only (each at the position it has in its own
    row), trailing columns padding; params: megatron-core's `SharedPrefixParams`, the segments
    (each group's prefix a root, each member's suffix continuing it), the whole attention mask.
    For original row b and column t < S-1 (the prediction of input_ids[b, t+1]): row[b] is its
    packed row, source[b, t] the packed column whose logits predict it, scored[b, t] whether
    both that target and the token predicting it are real (else source is 0 and the logprob is
    reported as 0: a prediction from a padding position attends nothing and means nothing).
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    params: Any
    row: torch.Tensor
    source: torch.Tensor
    scored: torch.Tensor

    @classmethod
    def build(
        cls,
        input_ids: torch.Tensor,
        valid: torch.Tensor,
        groups: list[Group],
        ends: list[int],
        multiple: int = 1,
    ) -> SharedPrefixLayout:
        """Pack `groups` of the [B, S] rows; each packed row padded to a multiple of `multiple`
        columns (the TP size under sequence parallelism)."""
        from megatron.core.transformer.shared_prefix_attention import (
            PrefixSegment,
            SharedPrefixParams,
        )

        device = input_ids.device
        batch, seq = input_ids.shape
        valid = valid.bool()
        positions = token_positions(valid)
        real = RealTokens(valid)
        width = max(1, max(real.packed_length(g, ends) for g in groups))
        width = -(-width // multiple) * multiple
        packed_ids = torch.zeros(len(groups), width, dtype=input_ids.dtype, device=device)
        packed_pos = torch.zeros(len(groups), width, dtype=positions.dtype, device=device)
        row_of = torch.zeros(batch, dtype=torch.long, device=device)
        # Column t's index among its row's real tokens; t < prefix: in the shared prefix.
        real_index = valid.long().cumsum(dim=1) - 1
        shift = torch.zeros(batch, seq, dtype=torch.long, device=device)
        column = torch.arange(seq, device=device)
        segments: list[PrefixSegment] = []
        for index, group in enumerate(groups):
            p = group.prefix
            keep = valid[group.first, :p]
            prefix_len = int(keep.sum())
            packed_ids[index, :prefix_len] = input_ids[group.first, :p][keep]
            packed_pos[index, :prefix_len] = positions[group.first, :p][keep]
            root = -1
            if prefix_len:
                segments.append(PrefixSegment(index, 0, prefix_len))
                root = len(segments) - 1
            offset = prefix_len
            for b in group.rows:
                keep = valid[b, p : ends[b]]
                length = int(keep.sum())
                span = slice(offset, offset + length)
                packed_ids[index, span] = input_ids[b, p : ends[b]][keep]
                packed_pos[index, span] = positions[b, p : ends[b]][keep]
                if length:
                    segments.append(PrefixSegment(index, offset, length, root))
                row_of[b] = index
                shift[b] = torch.where(column < p, 0, offset - prefix_len)
                offset += length
        source = (real_index + shift)[:, :-1]
        scored = valid[:, :-1] & valid[:, 1:]
        source = torch.where(scored, source, torch.zeros_like(source))
        if not segments:  # no real token at all: nothing is scored, one segment keeps it valid
            segments.append(PrefixSegment(0, 0, width))
        params = SharedPrefixParams(segments=tuple(segments))
        return cls(packed_ids, packed_pos, params, row_of, source, scored)

    def token_logprobs(
        self, logits: torch.Tensor, targets: torch.Tensor, vocab_size: int, temperature: float
    ) -> torch.Tensor:
        """[B, S-1] log p(targets[b, t]) at `temperature` over the first `vocab_size` ids, from
        the packed [R, T, V] logits; 0 where not `scored`."""
        rows = self.row[:, None] * logits.shape[1] + self.source  # flat [R * T] indices
        flat = logits.reshape(-1, logits.shape[-1])
        logprobs = TargetLogprob.apply(
            flat, targets.flatten(), vocab_size, temperature, rows.flatten()
        ).view_as(targets)
        return torch.where(self.scored, logprobs, torch.zeros_like(logprobs))


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
    logits the forward produced (the schedule's output tensor). `scored` ([B, S-1] bool): only
    these predictions are wanted, the LM head projects only the packed columns they come from
    (`scored_logits`), the rest read 0. The caller checked `unsupported_reason`."""
    check_targets(input_ids[:, 1:], vocab_size, "shared_prefix_logprobs")
    valid = valid.bool()
    groups, ends = plan_groups(input_ids, valid, FlopCost.of(model))
    layout = SharedPrefixLayout.build(input_ids, valid, groups, ends, multiple)
    if scored is None:
        logits = model_logits(
            model, layout.input_ids, layout.positions, None, packed_seq_params=layout.params
        )
        return layout.token_logprobs(logits, input_ids[:, 1:], vocab_size, temperature), logits
    from mcore_grpo.worker.scored_logits import picked_logits

    rows, columns = (scored.bool() & layout.scored).nonzero(as_tuple=True)
    flat = layout.source[rows, columns] * layout.input_ids.shape[0] + layout.row[rows]
    # A packed column can predict for several rows (the prompt's last token, for each sample).
    picked, which = torch.unique(flat, return_inverse=True)
    logits = picked_logits(model, layout.input_ids, layout.positions, None, picked, layout.params)
    targets = input_ids[rows, columns + 1]
    logprobs = TargetLogprob.apply(logits, targets, vocab_size, temperature, which)
    out = torch.zeros(scored.shape, dtype=logprobs.dtype, device=logprobs.device)
    return out.index_put((rows, columns), logprobs), logits
