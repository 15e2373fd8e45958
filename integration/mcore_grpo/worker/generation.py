"""Batched sampling with the policy itself (no KV cache; recomputes the prefix per token).

Covers temperature, top-p, max new tokens, stop tokens and left-padded prompts, and returns
the logprob of each sampled token under the temperature-scaled distribution. Ids at or beyond
the tokenizer vocab (the model's vocab is padded) are masked out of sampling.

Not implemented: sampling through megatron-core's dynamic inference engine on GPU (KV cache,
CUDA graphs); selecting it raises NotImplementedError. Its suspend/resume lifecycle around
weight updates, agreed by all ranks, is implemented (`engine_lifecycle.py`, attached through
`MegatronPolicyWorker(generation_engine=...)`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mcore_grpo.worker.forward import policy_logits, real_vocab_logits


@dataclass(frozen=True)
class SamplingParams:
    """Sampling knobs, NeMo-RL / vLLM names."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 8
    stop_token_ids: tuple[int, ...] = ()
    pad_token_id: int = 0
    backend: str = "torch"  # "mcore_dynamic_engine" is not implemented

    def validate(self) -> SamplingParams:
        """Raise for values that would silently sample wrong."""
        if self.backend != "torch":
            raise NotImplementedError(
                f"SamplingParams.backend={self.backend!r}: the megatron-core dynamic inference "
                "engine does not sample for this worker yet (it needs CUDA; only its "
                "suspend/resume lifecycle is wired, see engine_lifecycle.py); use backend='torch'."
            )
        if self.temperature <= 0:
            raise ValueError(
                "SamplingParams.temperature must be > 0 (use a small value for greedy)"
            )
        if not 0 < self.top_p <= 1:
            raise ValueError("SamplingParams.top_p must be in (0, 1]")
        return self


@dataclass
class GenerationOutput:
    """Prompt + generated tokens, left-padded layout kept."""

    output_ids: torch.Tensor  # [B, P + T]
    attention_mask: torch.Tensor  # [B, P + T], 1 = real token
    generated_mask: torch.Tensor  # [B, P + T], 1 = sampled token
    logprobs: torch.Tensor  # [B, P + T], logprob of each sampled token, 0 elsewhere
    generation_lengths: torch.Tensor  # [B]


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest prefix of tokens whose probability mass reaches top_p."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    probs = torch.softmax(sorted_logits, dim=-1)
    drop = probs.cumsum(dim=-1) - probs > top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    params: SamplingParams,
    vocab_size: int,
    generator: torch.Generator | None = None,
) -> GenerationOutput:
    """Sample up to `max_new_tokens` per row; a row stops after a stop token."""
    params.validate()
    ids, mask = prompt_ids.clone(), prompt_mask.long().clone()
    batch = ids.shape[0]
    done = torch.zeros(batch, dtype=torch.bool, device=ids.device)
    gen_mask = torch.zeros_like(mask)
    logprobs = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
    stops = torch.tensor(params.stop_token_ids, dtype=torch.long, device=ids.device)
    for _ in range(params.max_new_tokens):
        logits = policy_logits(model, ids, mask)[:, -1, :] / params.temperature
        logits = real_vocab_logits(logits, vocab_size)  # padded-vocab ids are no tokens
        logp = torch.log_softmax(logits, dim=-1)
        probs = torch.softmax(_top_p_filter(logits, params.top_p), dim=-1)
        token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        token_logp = logp.gather(-1, token[:, None]).squeeze(-1)
        live = ~done
        token = torch.where(live, token, torch.full_like(token, params.pad_token_id))
        ids = torch.cat([ids, token[:, None]], dim=1)
        mask = torch.cat([mask, live.long()[:, None]], dim=1)
        gen_mask = torch.cat([gen_mask, live.long()[:, None]], dim=1)
        logprobs = torch.cat([logprobs, (token_logp * live)[:, None]], dim=1)
        done = done | (live & torch.isin(token, stops))
        if bool(done.all()):
            break
    return GenerationOutput(ids, mask, gen_mask, logprobs, gen_mask.sum(dim=1))
