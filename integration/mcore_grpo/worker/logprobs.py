"""The policy's next-token logprobs: one entry point for the logprob and training passes, over
shared-prefix rows (`shared_prefix`) where the policy uses them, else whole rows (`packed_rows`)."""

from __future__ import annotations

import torch

from mcore_grpo.worker.config import WorkerConfig
from mcore_grpo.worker.packed_rows import packed_logprobs, sequence_multiple, whole_rows
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

    The rows are forwarded packed (`packed_rows`): real tokens only, whole or with each group's
    prompt shared. `scored` ([B, S-1] bool), when given: only those predictions are wanted (a
    loss's mask); the LM head projects only their positions (`scored_logits`) and every other
    logprob reads 0. A prediction made from a padding position (nothing real precedes a
    left-padded row's first token) reads 0 as well; none is ever trained on (`token_mask`
    covers completions only)."""
    vocab, temperature = config.model.vocab_size, config.temperature
    multiple = sequence_multiple(model)
    if shared_prefix:
        return shared_prefix_logprobs(model, input_ids, valid, vocab, temperature, multiple, scored)
    packed = whole_rows(input_ids, valid, multiple)
    return packed_logprobs(model, packed, input_ids, vocab, temperature, scored)
