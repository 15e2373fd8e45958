"""The policy's next-token logprobs: one entry point for the logprob and training passes, over
shared-prefix rows (`shared_prefix`) where the policy uses them, else whole rows (`forward`)."""

from __future__ import annotations

import torch

from mcore_grpo.worker.config import WorkerConfig
from mcore_grpo.worker.forward import (
    TargetLogprob,
    attention_inputs,
    check_targets,
    has_recurrent_layers,
    next_token_logprobs,
    policy_logits,
)
from mcore_grpo.worker.scored_logits import picked_logits
from mcore_grpo.worker.shared_prefix import shared_prefix_logprobs


def policy_token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    valid: torch.Tensor,
    config: WorkerConfig,
    shared_prefix: bool,
    scored: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, S-1] log p(input_ids[:, t+1] | prefix) at the sampling temperature over the real
    vocab, and the logits the forward produced (megatron's schedule takes them as its output).

    `scored` ([B, S-1] bool), when given: only those predictions are wanted (a loss's mask);
    the LM head projects only their positions (`scored_logits`) and every other logprob reads
    0. Shared-prefix rows report 0 where a prediction is made from a padding position (nothing
    real precedes a left-padded row's first token); whole rows report whatever such a position
    attended. Neither is ever trained on (`token_mask` covers completions only)."""
    vocab, temperature = config.model.vocab_size, config.temperature
    if shared_prefix:
        parallel = config.parallel
        multiple = parallel.tensor_model_parallel_size if parallel.sequence_parallel else 1
        return shared_prefix_logprobs(model, input_ids, valid, vocab, temperature, multiple, scored)
    if scored is None or has_recurrent_layers(model):
        logits = policy_logits(model, input_ids, valid)
        logprobs = next_token_logprobs(logits, input_ids, vocab, temperature)
        if scored is not None:
            logprobs = torch.where(scored.bool(), logprobs, torch.zeros_like(logprobs))
        return logprobs, logits
    check_targets(input_ids[:, 1:], vocab, "policy_token_logprobs")
    rows, columns = scored.bool().nonzero(as_tuple=True)
    positions, mask = attention_inputs(valid)
    picked = columns * input_ids.shape[0] + rows
    logits = picked_logits(model, input_ids, positions, mask, picked)
    targets = input_ids[rows, columns + 1]
    logprobs = TargetLogprob.apply(logits, targets, vocab, temperature)
    out = torch.zeros(scored.shape, dtype=logprobs.dtype, device=logprobs.device)
    return out.index_put((rows, columns), logprobs), logits
