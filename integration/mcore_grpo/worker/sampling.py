"""What every sampler shares: the knobs, the output layout, one sampling step, the rollout.

The samplers (`recompute_sampler`, `static_cache_sampler`) differ only in how they get the
next-token logits; drawing the token, its logprob, stop handling and the output layout are
here, so the backends cannot drift apart in semantics: the same logits and the same generator
give the same tokens whichever backend runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mcore_grpo.worker.forward import real_vocab_logits

# Backend names of `SamplingParams.backend`.
STATIC_CACHE = "static_cache"
RECOMPUTE = "recompute"
DYNAMIC_ENGINE = "mcore_dynamic_engine"
BACKENDS = (STATIC_CACHE, RECOMPUTE, DYNAMIC_ENGINE)


@dataclass(frozen=True)
class SamplingParams:
    """Sampling knobs, NeMo-RL / vLLM names.

    `backend`: "static_cache" (megatron-core's StaticInferenceContext: one prefill, then
    one-token steps over the KV cache), "recompute" (re-runs the whole prefix per token; the
    reference the cached path is tested against), "mcore_dynamic_engine" (megatron-core's
    DynamicInferenceEngine; needs flash-attn on a GPU, not implemented).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 8
    stop_token_ids: tuple[int, ...] = ()
    pad_token_id: int = 0
    backend: str = STATIC_CACHE
    # Greedy decoding (evaluation): the most likely token; its logprob is still scored under
    # the temperature-scaled distribution, as every sampled token's is.
    greedy: bool = False

    def validate(self) -> SamplingParams:
        """Raise for values that would silently sample wrong."""
        if self.backend not in BACKENDS:
            raise ValueError(f"SamplingParams.backend={self.backend!r}: use one of {BACKENDS}")
        if self.temperature <= 0:
            raise ValueError(
                "SamplingParams.temperature must be > 0 (use a small value for greedy)"
            )
        if not 0 < self.top_p <= 1:
            raise ValueError("SamplingParams.top_p must be in (0, 1]")
        if self.max_new_tokens < 1:
            raise ValueError("SamplingParams.max_new_tokens must be >= 1")
        return self


@dataclass
class GenerationOutput:
    """Prompt + generated tokens, left-padded layout kept."""

    output_ids: torch.Tensor  # [B, P + T]
    attention_mask: torch.Tensor  # [B, P + T], 1 = real token
    generated_mask: torch.Tensor  # [B, P + T], 1 = sampled token
    logprobs: torch.Tensor  # [B, P + T], logprob of each sampled token, 0 elsewhere
    generation_lengths: torch.Tensor  # [B]


@dataclass(frozen=True)
class GroupGenerators:
    """One seeded generator per block of `rows` consecutive rows (a prompt group).

    Lets one generate call sample many prompt groups in one batch (the weights are read once
    per decode step for all of them, which is what bounds a CPU decode step) while each
    group's draws stay those of its own generator: the same tokens as sampling that group
    alone with it, whatever else shares the batch."""

    generators: tuple[torch.Generator, ...]
    rows: int

    @property
    def device(self) -> torch.device:
        """Where the draws happen (every generator's device)."""
        return self.generators[0].device


# What the samplers take: one generator for the batch, one per row group, or none.
SamplingGenerator = torch.Generator | GroupGenerators | None


def _draw(probs: torch.Tensor, generator: SamplingGenerator) -> torch.Tensor:
    """One token per row of [B, V] `probs`, on the generator's device, returned on probs'."""
    if isinstance(generator, GroupGenerators):
        if len(generator.generators) * generator.rows != probs.shape[0]:
            raise ValueError(
                f"{len(generator.generators)} generators x {generator.rows} rows do not cover "
                f"a batch of {probs.shape[0]}"
            )
        r = generator.rows
        return torch.cat(
            [_draw(probs[i * r : (i + 1) * r], g) for i, g in enumerate(generator.generators)]
        )
    if generator is not None and generator.device != probs.device:
        return _inverse_cdf(probs.to(generator.device), generator).to(probs.device)
    return _inverse_cdf(probs, generator)


def _inverse_cdf(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of [B, V] `probs` (unnormalised, >= 0): the first id whose running
    sum exceeds u * total, u ~ U[0, 1) drawn per row.

    One uniform per row, where `torch.multinomial` draws one exponential per vocab entry: on
    CPU 16 ms against about 1 ms for 16 x 49,152, which was 8 % of a SmolLM2 decode step.
    The running sum is float64, so its rounding (about 1e-16 of the total) is far below any
    token's probability that matters. A zero-probability id (top-p cut, padded vocab) is never
    drawn: its running sum equals the previous one, and u * total stays below the total (u is at
    most 1 - 2**-53, and round-to-nearest never lifts that product to the total)."""
    cdf = probs.double().cumsum(dim=-1)
    total = cdf[:, -1:]
    u = torch.rand(total.shape, generator=generator, dtype=torch.float64, device=probs.device)
    return torch.searchsorted(cdf, u * total, right=True).squeeze(-1)


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest prefix of tokens whose probability mass reaches top_p."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    probs = torch.softmax(sorted_logits, dim=-1)
    drop = probs.cumsum(dim=-1) - probs > top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


def sample_next(
    logits: torch.Tensor,
    params: SamplingParams,
    vocab_size: int,
    generator: SamplingGenerator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from [B, V] fp32 next-token logits; (token, its logprob).

    The logprob is under the temperature-scaled distribution over the real vocab (what the
    logprob and training forwards score). Padded-vocab ids are at -inf, so never drawn.
    The draw happens on the generator's device: a seeded generator gives the same tokens
    whichever backend produced the logits (on CUDA pass a CUDA generator to avoid a copy).
    """
    logits = real_vocab_logits(logits / params.temperature, vocab_size)
    logp = torch.log_softmax(logits, dim=-1)
    if params.greedy:
        token = logits.argmax(dim=-1)
        return token, logp.gather(-1, token[:, None]).squeeze(-1)
    probs = torch.softmax(_top_p_filter(logits, params.top_p), dim=-1)
    token = _draw(probs, generator)
    return token, logp.gather(-1, token[:, None]).squeeze(-1)


class Rollout:
    """Preallocated [B, P + max_new_tokens] buffers, filled one column per step.

    A row is live until it samples a stop token; afterwards its columns hold the pad id with
    mask 0, generated-mask 0 and logprob 0 (the recompute sampler's layout since the seed).

    For a one-token decode step over a KV cache it also keeps, column by column, what that
    step needs: `key_padding` ([B, 1, 1, width] bool, True = pad or stopped column; the step
    passes a view of its first `length` columns) and `real_tokens` ([B], real tokens so far).
    Updating them in place costs O(B) per step; rebuilding them from `mask` would cost
    O(B * length) and allocate per step.
    """

    def __init__(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams
    ) -> None:
        batch, plen = prompt_ids.shape
        width = plen + params.max_new_tokens
        device = prompt_ids.device
        self.params = params
        self.prompt_len = plen
        self.steps = 0
        self.ids = torch.full((batch, width), params.pad_token_id, dtype=torch.long, device=device)
        self.ids[:, :plen] = prompt_ids
        self.mask = torch.zeros((batch, width), dtype=torch.long, device=device)
        self.mask[:, :plen] = prompt_mask.long()
        self.gen_mask = torch.zeros_like(self.mask)
        self.logprobs = torch.zeros((batch, width), dtype=torch.float32, device=device)
        self.done = torch.zeros(batch, dtype=torch.bool, device=device)
        self.stops = torch.tensor(params.stop_token_ids, dtype=torch.long, device=device)
        self.key_padding = torch.ones((batch, 1, 1, width), dtype=torch.bool, device=device)
        self.key_padding[:, 0, 0, :plen] = ~prompt_mask.bool()
        self.real_tokens = self.mask[:, :plen].sum(dim=1)

    @property
    def length(self) -> int:
        """Columns filled so far (prompt + sampled)."""
        return self.prompt_len + self.steps

    def append(self, token: torch.Tensor, token_logp: torch.Tensor) -> bool:
        """Write one sampled column; True when every row has stopped or the budget is spent."""
        live = ~self.done
        col = self.length
        self.ids[:, col] = torch.where(
            live, token, torch.full_like(token, self.params.pad_token_id)
        )
        self.mask[:, col] = live.long()
        self.gen_mask[:, col] = live.long()
        self.key_padding[:, 0, 0, col] = ~live
        self.real_tokens += live.long()
        self.logprobs[:, col] = token_logp * live
        self.done = self.done | (live & torch.isin(token, self.stops))
        self.steps += 1
        return self.steps >= self.params.max_new_tokens or bool(self.done.all())

    def last_position(self) -> torch.Tensor:
        """[B, 1] position of the last filled column's token: the real tokens before it (as
        ``cumsum - 1`` of `forward.token_positions` counts; 0 for a row with none)."""
        return (self.real_tokens - 1).clamp(min=0)[:, None]

    def output(self) -> GenerationOutput:
        """The filled columns only (as if built by concatenation)."""
        n = self.length
        gen = self.gen_mask[:, :n]
        return GenerationOutput(
            self.ids[:, :n], self.mask[:, :n], gen, self.logprobs[:, :n], gen.sum(dim=1)
        )


def model_device(model: torch.nn.Module) -> torch.device:
    """Where the model's parameters live: every sampler tensor is created there."""
    return next(model.parameters()).device
