"""The LM head only where a prediction is scored.

A training pass needs the next-token distribution only where the loss reads it (a GRPO loss:
completion tokens), and so do the old and reference logprobs it is compared with. GPTModel
projects every position onto the vocabulary: [rows, columns, V] logits and their backward, a
large share of a pass at small depth or long prompts (SmolLM2-135M: 2 h V = 57 MFLOP a token
against 239 for its 30 layers). megatron-core's `output_processor` hook (GPTModel.forward) hands
the final hidden states over instead; `picked_logits` projects only the picked positions.

Where the hook cannot pick, every position is projected and the picked ones are read out (the
same values): sequence parallelism (each TP rank holds a slice of the columns, which the output
layer gathers), multi-token prediction (its loss reads every position), a pipeline stage
without the head, a model without the hook.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from mcore_grpo.worker.forward import forward_packing, gpt_module, model_logits


def can_pick(model: torch.nn.Module) -> bool:
    """Whether `model`'s GPTModel can project only picked positions (`output_processor`)."""
    gpt = gpt_module(model)
    config = gpt.config
    return (
        "output_processor" in inspect.signature(type(gpt).forward).parameters
        and bool(getattr(gpt, "post_process", True))
        and not config.sequence_parallel
        and not getattr(config, "mtp_num_layers", None)
    )


def _project_picked(
    *,
    hidden_states: torch.Tensor,
    output_layer: Any,
    output_weight: torch.Tensor | None,
    runtime_gather_output: bool | None,
    context: torch.Tensor,
    scale_logits: Any,
    **_: Any,
) -> torch.Tensor:
    """GPTModel's `output_processor`: [s, b, h] final hidden states -> [1, n, V/tp] logits at
    `context`, flat indices t * b + row."""
    picked = hidden_states.flatten(0, 1).index_select(0, context).unsqueeze(1)
    logits, _ = output_layer(
        picked, weight=output_weight, runtime_gather_output=runtime_gather_output
    )
    return scale_logits(logits).transpose(0, 1)


def picked_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    mask: torch.Tensor | None,
    picked: torch.Tensor,
    packed_seq_params: Any = None,
    padding_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """[n, V] fp32 logits over the full (padded) vocab, gathered across TP ranks, at `picked`:
    flat indices t * B + b into the [B, S] rows (`model_logits`: `padding_mask`)."""
    from megatron.core import parallel_state, tensor_parallel

    if not can_pick(model):
        logits = model_logits(
            model,
            input_ids,
            positions,
            mask,
            packed_seq_params=packed_seq_params,
            padding_mask=padding_mask,
        )
        rows = input_ids.shape[0]
        return logits[picked % rows, picked // rows]
    kwargs: dict[str, Any] = {
        "output_processor": _project_picked,
        "output_processor_context": picked,
        **forward_packing(packed_seq_params, padding_mask),
    }
    logits = model(input_ids, positions, mask, **kwargs)[0]
    if parallel_state.get_tensor_model_parallel_world_size() > 1:
        logits = tensor_parallel.gather_from_tensor_model_parallel_region(logits)
    return logits.float()
