"""Rows forwarded as their real tokens only, and the logprobs read back in the rows' layout.

Every logprob and training forward packs its [B, S] rows first: padding is dropped, each token
keeps the position it has in its own row (real tokens counted), trailing columns are padding.
How rows share a packed row is the caller's plan (`Group`s):

- **whole rows** (`whole_row_groups`): one packed row per row, its real tokens left-aligned.
  megatron-core's own causal attention is then exact without any mask (SDPA's causal kernel,
  Transformer Engine's, megatron's default causal mask): a real token sees the real tokens
  before it, trailing pads are seen by none. Rotations by sequence index (rope without
  `rope_from_position_ids`, MLA, yarn) and sliding windows see indices equal to positions, and
  recurrent layers (Mamba, gated delta net) no pad before a real token.
- **shared-prefix rows** (`shared_prefix.plan_groups`): a group's common prefix once, each
  member's suffix after it, described to megatron-core by segments (`SharedPrefixParams`).

Predictions are read from the packed logits by index (`TargetLogprob`'s `rows`), so the
[B, S-1] logprobs of NeMo-RL's contract come back without copying the logits into the rows'
layout; the LM head projects only the scored predictions when asked (`scored_logits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mcore_grpo.worker.forward import (
    TargetLogprob,
    check_targets,
    gpt_module,
    model_logits,
    moe_padding_mask,
    token_positions,
)


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


def whole_row_groups(ends: list[int]) -> list[Group]:
    """Every row its own packed row (its whole extent the 'prefix': nothing is shared)."""
    return [Group(row, 1, end) for row, end in enumerate(ends)]


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


@dataclass(frozen=True)
class PackedRows:
    """The packed rows and where each original row's predictions come from in them.

    input_ids, positions: [R, T], real tokens only (each at the position it has in its own
    row), trailing columns padding; params: megatron-core's `SharedPrefixParams` when a packed
    row holds several rows (each group's prefix a root segment, each member's suffix continuing
    it: the whole attention mask), None for whole rows (plain causal attention). For original
    row b and column t < S-1 (the prediction of input_ids[b, t+1]): row[b] is its packed row,
    source[b, t] the packed column whose logits predict it, scored[b, t] whether both that
    target and the token predicting it are real (else source is 0 and the logprob is reported
    as 0: a prediction from a padding position attends nothing and means nothing). padding:
    [R, T], True at the columns that hold no real token.
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    params: Any
    row: torch.Tensor
    source: torch.Tensor
    scored: torch.Tensor
    padding: torch.Tensor

    @classmethod
    def build(
        cls,
        input_ids: torch.Tensor,
        valid: torch.Tensor,
        groups: list[Group],
        ends: list[int],
        multiple: int = 1,
        min_width: int = 1,
    ) -> PackedRows:
        """Pack `groups` of the [B, S] rows; each packed row at least `min_width` columns,
        padded to a multiple of `multiple` (the TP size under sequence parallelism)."""
        device = input_ids.device
        batch, seq = input_ids.shape
        valid = valid.bool()
        positions = token_positions(valid)
        real = RealTokens(valid)
        width = max(min_width, max((real.packed_length(g, ends) for g in groups), default=0))
        width = -(-width // multiple) * multiple
        rows, width = expert_parallel_shape(len(groups), width, device)
        packed_ids = torch.zeros(rows, width, dtype=input_ids.dtype, device=device)
        packed_pos = torch.zeros(rows, width, dtype=positions.dtype, device=device)
        row_of = torch.zeros(batch, dtype=torch.long, device=device)
        # Column t's index among its row's real tokens; t < prefix: in the shared prefix.
        real_index = valid.long().cumsum(dim=1) - 1
        shift = torch.zeros(batch, seq, dtype=torch.long, device=device)
        column = torch.arange(seq, device=device)
        segments: list[tuple[int, int, int, int, int]] = []  # (row, start, length, parent, count)
        real_columns = torch.zeros(rows, dtype=torch.long)
        for index, group in enumerate(groups):
            p = group.prefix
            keep = valid[group.first, :p]
            prefix_len = int(keep.sum())
            packed_ids[index, :prefix_len] = input_ids[group.first, :p][keep]
            packed_pos[index, :prefix_len] = positions[group.first, :p][keep]
            root = -1
            if prefix_len:
                # The prefix stands for every member, those with nothing after it included.
                segments.append((index, 0, prefix_len, -1, group.size))
                root = len(segments) - 1
            offset = prefix_len
            for b in group.rows:
                keep = valid[b, p : ends[b]]
                length = int(keep.sum())
                span = slice(offset, offset + length)
                packed_ids[index, span] = input_ids[b, p : ends[b]][keep]
                packed_pos[index, span] = positions[b, p : ends[b]][keep]
                if length:
                    segments.append((index, offset, length, root, 1))
                row_of[b] = index
                shift[b] = torch.where(column < p, 0, offset - prefix_len)
                offset += length
            real_columns[index] = offset
        source = (real_index + shift)[:, :-1]
        scored = valid[:, :-1] & valid[:, 1:]
        source = torch.where(scored, source, torch.zeros_like(source))
        shares = any(group.size > 1 for group in groups)
        params = _segment_params(segments, width) if shares else None
        padding = torch.arange(width)[None, :] >= real_columns[:, None]
        return cls(packed_ids, packed_pos, params, row_of, source, scored, padding.to(device))

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


def expert_parallel_shape(rows: int, width: int, device: torch.device) -> tuple[int, int]:
    """(rows, width) of the packed rows, agreed over the expert-parallel group: the largest
    of each. megatron-core's MoE token dispatchers exchange every EP rank's tokens in
    collectives of equal sizes, and EP ranks hold other rows (they are data-parallel ranks), so
    each packs to the same [R, T]; the extra rows and columns are padding, which no segment
    covers and nothing scores (tensor-parallel peers hold the same rows already)."""
    from megatron.core import parallel_state

    if (
        not parallel_state.model_parallel_is_initialized()
        or parallel_state.get_expert_model_parallel_world_size() == 1
    ):
        return rows, width
    shape = torch.tensor([rows, width], dtype=torch.long, device=device)
    group = parallel_state.get_expert_model_parallel_group()
    torch.distributed.all_reduce(shape, op=torch.distributed.ReduceOp.MAX, group=group)
    return int(shape[0]), int(shape[1])


def _segment_params(segments: list[tuple[int, int, int, int, int]], width: int) -> Any:
    """megatron-core's `SharedPrefixParams` for the segments (patches/Megatron-LM/
    shared-prefix-attention.patch); one segment over the first row when there is no real
    token at all (nothing is scored, the params stay valid). Each segment's sample count goes
    to megatron-core only where its routers take it (shared-prefix-moe-token-counts.patch)."""
    from megatron.core.transformer.shared_prefix_attention import (
        PrefixSegment,
        SharedPrefixParams,
    )

    counted = "count" in PrefixSegment.__dataclass_fields__
    found = [PrefixSegment(*(s if counted else s[:4])) for s in segments]
    return SharedPrefixParams(segments=tuple(found or [PrefixSegment(0, 0, width)]))


def packed_logprobs(
    model: torch.nn.Module,
    packed: PackedRows,
    input_ids: torch.Tensor,
    vocab_size: int,
    temperature: float,
    scored: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, S-1] next-token logprobs of the [B, S] rows from one forward of their packed rows,
    and the logits it produced (the schedule's output tensor). `scored` ([B, S-1] bool): only
    these predictions are wanted, the LM head projects only the packed columns they come from
    (`scored_logits`), the rest read 0."""
    check_targets(input_ids[:, 1:], vocab_size, "packed_logprobs")
    padding = moe_padding_mask(model, packed.padding)
    if scored is None:
        logits = model_logits(
            model,
            packed.input_ids,
            packed.positions,
            None,
            packed_seq_params=packed.params,
            padding_mask=padding,
        )
        return packed.token_logprobs(logits, input_ids[:, 1:], vocab_size, temperature), logits
    from mcore_grpo.worker.scored_logits import picked_logits

    rows, columns = (scored.bool() & packed.scored).nonzero(as_tuple=True)
    flat = packed.source[rows, columns] * packed.input_ids.shape[0] + packed.row[rows]
    # A packed column can predict for several rows (the prompt's last token, for each sample).
    picked, which = torch.unique(flat, return_inverse=True)
    logits = picked_logits(
        model, packed.input_ids, packed.positions, None, picked, packed.params, padding
    )
    targets = input_ids[rows, columns + 1]
    logprobs = TargetLogprob.apply(logits, targets, vocab_size, temperature, which)
    out = torch.zeros(scored.shape, dtype=logprobs.dtype, device=logprobs.device)
    return out.index_put((rows, columns), logprobs), logits


def sequence_multiple(model: torch.nn.Module) -> int:
    """What a packed row's width must be a multiple of: the TP size under sequence parallelism
    (each TP rank holds an equal slice of the columns), else 1."""
    from megatron.core import parallel_state

    if not gpt_module(model).config.sequence_parallel:
        return 1
    return parallel_state.get_tensor_model_parallel_world_size()


def whole_rows(input_ids: torch.Tensor, valid: torch.Tensor, multiple: int = 1) -> PackedRows:
    """The [B, S] rows packed one per row (real tokens left-aligned, no segments), S columns
    wide as they came: every column still goes through each layer, so an MoE capacity drops
    what it did over the padded rows; the routers' losses and statistics leave the padding
    out (`moe_padding_mask`), as over shared-prefix rows."""
    ends = row_ends(valid)
    groups = whole_row_groups(ends)
    return PackedRows.build(input_ids, valid, groups, ends, multiple, min_width=input_ids.shape[1])


def policy_logits(
    model: torch.nn.Module, input_ids: torch.Tensor, valid: torch.Tensor
) -> torch.Tensor:
    """[B, S, V] fp32 logits over the full (padded) vocab, gathered across TP ranks, in the
    rows' layout: each real column's exactly as under a causal + key-padding mask; a padding
    column reads the real column before it (the first for leading pads), which nothing
    scores. Forwarded as whole packed rows (a real token's packed column is its position)."""
    packed = whole_rows(input_ids, valid, sequence_multiple(model))
    padding = moe_padding_mask(model, packed.padding)
    logits = model_logits(model, packed.input_ids, packed.positions, None, padding_mask=padding)
    width = logits.shape[1]
    index = torch.arange(input_ids.shape[0], device=logits.device)[:, None] * width
    index = (index + token_positions(valid.bool())).flatten()
    flat = logits.reshape(-1, logits.shape[-1]).index_select(0, index)
    return flat.view(*input_ids.shape, -1)
