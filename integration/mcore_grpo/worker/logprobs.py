"""The policy's next-token logprobs: one entry point for the logprob and training passes, over
shared-prefix rows (`shared_prefix`) where the policy uses them, else whole rows (`forward`)."""

from __future__ import annotations

import torch

from mcore_grpo.worker.config import WorkerConfig
from mcore_grpo.worker.forward import next_token_logprobs, policy_logits
from mcore_grpo.worker.shared_prefix import shared_prefix_logprobs


def policy_token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    valid: torch.Tensor,
    config: WorkerConfig,
    shared_prefix: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, S-1] log p(input_ids[:, t+1] | prefix) at the sampling temperature over the real
    vocab, and the logits the forward produced (megatron's schedule takes them as its output).

    Shared-prefix rows report 0 where a prediction is made from a padding position (nothing
    real precedes a left-padded row's first token); whole rows report whatever such a position
    attended. Neither is ever trained on (`token_mask` covers completions only)."""
    vocab, temperature = config.model.vocab_size, config.temperature
    if shared_prefix:
        parallel = config.parallel
        multiple = parallel.tensor_model_parallel_size if parallel.sequence_parallel else 1
        return shared_prefix_logprobs(model, input_ids, valid, vocab, temperature, multiple)
    logits = policy_logits(model, input_ids, valid)
    return next_token_logprobs(logits, input_ids, vocab, temperature), logits
