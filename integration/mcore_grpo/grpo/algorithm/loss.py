"""Clipped policy-gradient loss with a KL penalty to the reference policy.

NeMo-RL's `ClippedPGLossFn` (nemo_rl/algorithms/loss/loss_functions.py) at the NeMo-RL pin
7ea279ab, value AND gradient, for the GRPO options this project accepts (no
importance-sampling correction, no CISPO/GSPO, no on-policy KL approximation). It includes
NeMo-RL commit 33bce20d7 ("fix: KL backward in GRPO", #2506): the per-token KL estimate is
multiplied by ``exp(logp - logp.detach())`` (value 1) before the output clamp, so its
gradient carries the score-function term ``k_t * grad(logp_t)`` of a KL whose samples come
from the policy being optimised (https://arxiv.org/abs/2506.09477):

    L = E_t[ max(-A_t * r_t, -A_t * clip(r_t, 1 - eps_low, 1 + eps_high)) ]
        + beta * E_t[ w_t * KL_k(pi_theta || pi_ref) ]     r_t = exp(logp_t - logp_old_t)
                                                           w_t = exp(logp_t - sg(logp_t))

optionally with dual clipping (``ratio_clip_c``) for negative advantages. The per-token KL
estimator is Schulman's k1/k2/k3 with NeMo-RL's input and output clamps; a clamped token
contributes no KL gradient (NeMo-RL detaches the weight where the input clamp acts).
`tests/integration/grpo/test_nemo_rl_parity.py` checks all of this against NeMo-RL's own code.

Normalisation is global, not per microbatch, with NeMo-RL's ``masked_mean`` (its ``+1e-8``
in the denominator included): token-level loss divides the masked sum by the number of
valid tokens in the *whole* optimizer step (all microbatches, all data-parallel ranks);
sequence-level loss averages each sequence over its tokens and divides by the global
number of valid sequences. The caller passes those global counts, so summing the
microbatch losses gives exactly the full-batch mean and gradient accumulation needs no
rescaling.

This is the ONE GRPO loss of the project. The split train step differentiates it through
`loss_sum_fn` (normalisation factors 1; the step divides once by the global
`mcore_grpo.worker.batch.valid_count`, over the positions `loss_mask` selects). The worker's
default loss is the same function without a KL term (`policy_gradient_only`).
"""

from __future__ import annotations

import dataclasses
from functools import partial

import torch

from mcore_grpo.config.loss import KL_TYPES, ClippedPGLossConfig
from mcore_grpo.worker.batch import Batch, LossSumFn, loss_mask


def calculate_kl(
    logprobs: torch.Tensor,
    logprobs_reference: torch.Tensor,
    kl_type: str = "k3",
    input_clamp_value: float | None = 20.0,
    output_clamp_value: float | None = 10.0,
    importance_sampling_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate from the sampled tokens' logprobs.

    http://joschu.net/blog/kl-approx.html with ``logr = logp_ref - logp``:
    k1 = -logr, k2 = logr^2 / 2, k3 = exp(logr) - 1 - logr (unbiased and >= 0).
    `importance_sampling_weights` multiply the estimate before the output clamp; where the
    input clamp acts they are detached, so a clamped token has no gradient at all (NeMo-RL's
    `nemo_rl.algorithms.utils.calculate_kl`).
    """
    logr = logprobs_reference - logprobs
    if input_clamp_value is not None:
        clamped = logr.clamp(min=-input_clamp_value, max=input_clamp_value)
        if importance_sampling_weights is not None:
            importance_sampling_weights = torch.where(
                logr == clamped, importance_sampling_weights, importance_sampling_weights.detach()
            )
        logr = clamped
    if kl_type == "k1":
        kl = -logr
    elif kl_type == "k2":
        kl = logr.square() / 2
    elif kl_type == "k3":
        kl = torch.exp(logr) - 1 - logr
    else:
        raise ValueError(f"kl_type={kl_type!r}: use one of {', '.join(KL_TYPES)}")
    if importance_sampling_weights is not None:
        kl = importance_sampling_weights * kl
    if output_clamp_value is not None:
        kl = kl.clamp(min=-output_clamp_value, max=output_clamp_value)
    return kl


def on_policy_kl_weights(logprobs: torch.Tensor) -> torch.Tensor:
    """``exp(logp - logp.detach())``: value 1, gradient ``grad(logp)`` (NeMo-RL #2506).

    The KL samples are drawn from the policy being optimised, so the gradient of the
    expected KL has a score-function term ``k_t * grad(logp_t)`` besides ``grad(k_t)``;
    multiplying the estimate by this weight adds exactly that term.
    """
    weights = torch.exp(logprobs - logprobs.detach())
    return torch.nan_to_num(weights, nan=0.0, posinf=0.0, neginf=0.0)


def masked_mean(
    values: torch.Tensor,
    mask: torch.Tensor,
    dim: int | None = None,
    global_normalization_factor: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """NeMo-RL's `masked_mean`: masked sum / (count or the given global factor + 1e-8)."""
    factor = (
        mask.sum(dim=dim) if global_normalization_factor is None else global_normalization_factor
    )
    if dim is None:
        return (values * mask).sum() / (factor + 1e-8)
    return (values * mask).sum(dim=dim) / (factor + 1e-8)


def _reduce(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    token_level: bool,
    global_valid_toks: float | torch.Tensor,
    global_valid_seqs: float | torch.Tensor,
) -> torch.Tensor:
    """Masked mean over the global token count, or of the per-sequence means over the global
    sequence count (a sequence without valid tokens contributes 0, as in NeMo-RL)."""
    if token_level:
        return masked_mean(per_token, mask, global_normalization_factor=global_valid_toks)
    seq_mean = masked_mean(per_token, mask, dim=-1)
    has_tokens = (mask.sum(dim=-1) > 0).to(per_token.dtype)
    return masked_mean(seq_mean, has_tokens, global_normalization_factor=global_valid_seqs)


def clipped_token_loss(
    logprobs: torch.Tensor,
    prev_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    cfg: ClippedPGLossConfig,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped surrogate (dual clip included) and where the clip decided, [B, T].

    ``max(-A r, -A clip(r))`` with ``r = exp(logprobs - prev_logprobs)``; `advantages` is [B]
    or [B, T]. The second tensor is 1.0 where the clipped term won (zero gradient this step).
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    advantages = advantages.expand_as(logprobs)
    ratios = torch.exp(logprobs - prev_logprobs)
    clipped = ratios.clamp(1.0 - cfg.ratio_clip_min, 1.0 + cfg.ratio_clip_max)
    unclipped_loss, clipped_loss = -advantages * ratios, -advantages * clipped
    clip_loss = torch.max(unclipped_loss, clipped_loss)
    if cfg.ratio_clip_c is not None:
        dual = -advantages * cfg.ratio_clip_c
        clip_loss = torch.where(advantages < 0, torch.min(clip_loss, dual), clip_loss)
    return clip_loss, (clipped_loss > unclipped_loss).to(logprobs.dtype)


def clipped_pg_loss(
    logprobs: torch.Tensor,
    prev_logprobs: torch.Tensor,
    reference_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: ClippedPGLossConfig,
    *,
    global_valid_toks: float | torch.Tensor,
    global_valid_seqs: float | torch.Tensor,
    generation_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The GRPO loss of one microbatch, already divided by the step's global counts.

    All tensors are aligned on generated-token positions, shape [B, T]: `logprobs` (current
    policy, with grad), `prev_logprobs` (policy before this step), `reference_logprobs`
    (the reference policy's; read only when ``reference_policy_kl_penalty != 0``, as in
    NeMo-RL), `mask` (1 where a response token is scored), `generation_logprobs` (the
    sampler's; optional, only for the two diagnostics below). `advantages` is [B] or [B, T].
    Returns the loss and detached metrics under NeMo-RL's names and meanings, each divided
    by the global count `metric_normalizers` names, so they too sum over microbatches:
    ``loss``, ``kl_penalty`` (the UNSCALED KL estimate; 0 when beta is 0), ``probs_ratio``,
    ``probs_ratio_clamped``, ``num_valid_samples`` (a raw count), with `generation_logprobs`
    also ``approx_entropy`` and ``gen_kl_error`` (`sampler_diagnostics`), plus this
    project's ``clip_fraction`` (share of tokens the clip decided; not a NeMo-RL metric).
    """
    mask = mask.to(logprobs.dtype)
    clip_loss, was_clipped = clipped_token_loss(logprobs, prev_logprobs, advantages, cfg)
    token_level = cfg.token_level_loss
    actor_loss = _reduce(clip_loss, mask, token_level, global_valid_toks, global_valid_seqs)
    beta = cfg.reference_policy_kl_penalty
    if beta == 0:
        loss = actor_loss
        kl = torch.zeros((), dtype=actor_loss.dtype, device=actor_loss.device)
    else:
        kl = _reference_kl(
            logprobs, reference_logprobs, mask, cfg, global_valid_toks, global_valid_seqs
        )
        loss = actor_loss + beta * kl

    with torch.no_grad():
        toks = global_valid_toks
        metrics = {
            "loss": loss.detach(),
            "actor_loss": actor_loss.detach(),
            "kl_penalty": kl.detach(),
            **_ratio_metrics(logprobs, prev_logprobs, was_clipped, mask, cfg, toks, loss.dtype),
        }
        if generation_logprobs is not None:
            metrics |= sampler_diagnostics(
                logprobs, prev_logprobs, generation_logprobs, mask, cfg, toks
            )
    return loss, metrics


def _reference_kl(
    logprobs: torch.Tensor,
    reference_logprobs: torch.Tensor | None,
    mask: torch.Tensor,
    cfg: ClippedPGLossConfig,
    global_valid_toks: float | torch.Tensor,
    global_valid_seqs: float | torch.Tensor,
) -> torch.Tensor:
    """The KL term before beta: NeMo-RL's `ClippedPGLossFn` KL to the reference (its input
    and output clamps, the on-policy weight of #2506), reduced like the actor loss."""
    if reference_logprobs is None:
        raise ValueError(
            f"clipped_pg_loss: loss_fn.reference_policy_kl_penalty="
            f"{cfg.reference_policy_kl_penalty} needs the reference policy's logprobs "
            "(batch['reference_policy_logprobs'])"
        )
    kl_tokens = calculate_kl(
        logprobs,
        reference_logprobs,
        cfg.reference_policy_kl_type,
        cfg.kl_input_clamp_value,
        cfg.kl_output_clamp_value,
        importance_sampling_weights=on_policy_kl_weights(logprobs),
    )
    return _reduce(kl_tokens, mask, cfg.token_level_loss, global_valid_toks, global_valid_seqs)


def _ratio_metrics(
    logprobs: torch.Tensor,
    prev_logprobs: torch.Tensor,
    was_clipped: torch.Tensor,
    mask: torch.Tensor,
    cfg: ClippedPGLossConfig,
    global_valid_toks: float | torch.Tensor,
    dtype: torch.dtype,
) -> dict[str, torch.Tensor]:
    """NeMo-RL's ``probs_ratio``, ``probs_ratio_clamped`` and ``num_valid_samples``
    (ClippedPGLossFn) and this project's ``clip_fraction``; the caller holds `no_grad`."""
    toks = global_valid_toks
    ratios = torch.exp(logprobs - prev_logprobs)
    clamped = ratios.clamp(1.0 - cfg.ratio_clip_min, 1.0 + cfg.ratio_clip_max)
    return {
        "probs_ratio": masked_mean(ratios, mask, global_normalization_factor=toks),
        "probs_ratio_clamped": masked_mean(clamped, mask, global_normalization_factor=toks),
        "num_valid_samples": (mask.sum(dim=-1) > 0).sum().to(dtype),
        "clip_fraction": masked_mean(was_clipped, mask, global_normalization_factor=toks),
    }


def sampler_diagnostics(
    logprobs: torch.Tensor,
    prev_logprobs: torch.Tensor,
    generation_logprobs: torch.Tensor,
    mask: torch.Tensor,
    cfg: ClippedPGLossConfig,
    global_valid_toks: float | torch.Tensor,
) -> dict[str, torch.Tensor]:
    """NeMo-RL's ``approx_entropy`` and ``gen_kl_error`` (ClippedPGLossFn), token-normalised.

    ``approx_entropy`` = E_gen[-(pi/pi_gen) log pi] over the sampled tokens: the policy's
    token entropy estimated from its own samples, the first thing to fall when a run
    collapses onto one answer. ``gen_kl_error`` = KL(pi_gen || pi_old) by the config's
    k-type without clamps: how far the sampler's logprobs are from the trainer's.
    """
    with torch.no_grad():
        entropy = -masked_mean(
            torch.exp(logprobs - generation_logprobs) * logprobs,
            mask,
            global_normalization_factor=global_valid_toks,
        )
        gen_kl = calculate_kl(
            generation_logprobs, prev_logprobs, cfg.reference_policy_kl_type, None, None
        )
        gen_kl_error = masked_mean(gen_kl, mask, global_normalization_factor=global_valid_toks)
    return {"approx_entropy": entropy.detach(), "gen_kl_error": gen_kl_error}


def metric_normalizers(cfg: ClippedPGLossConfig) -> dict[str, str]:
    """Which global count each metric of `clipped_pg_loss` is divided by: ``"tokens"``,
    ``"sequences"`` or ``"none"`` (NeMo-RL's `ClippedPGLossFn.metric_normalizations`), so a
    caller that ran it with factors 1 can rescale each metric once per optimizer step."""
    grad = "tokens" if cfg.token_level_loss else "sequences"
    return {
        "loss": grad,
        "actor_loss": grad,
        "kl_penalty": grad,
        "probs_ratio": "tokens",
        "probs_ratio_clamped": "tokens",
        "num_valid_samples": "none",
        "clip_fraction": "tokens",
        "approx_entropy": "tokens",
        "gen_kl_error": "tokens",
    }


# ---- the loss over a worker batch (the train step's `LossSumFn`) --------------------------
def policy_gradient_only(config: ClippedPGLossConfig) -> ClippedPGLossConfig:
    """The worker's default loss: `config`'s clip and normalisation, no KL, no dual clip."""
    return dataclasses.replace(config, reference_policy_kl_penalty=0.0, ratio_clip_c=None)


def previous_logprobs(logprobs: torch.Tensor, batch: Batch) -> torch.Tensor:
    """[B, S-1] old-policy logprobs of the trained positions; on-policy (detached) if absent.

    `logprobs` is [B, S-1] (next-token, as the train step computes them); the optional
    `batch["prev_logprobs"]` is [B, S] aligned with input_ids, position 0 unused -- the
    layout `get_logprobs` returns, so its output can be put in the batch as it is.
    """
    rows, seq = batch["input_ids"].shape
    if tuple(logprobs.shape) != (rows, seq - 1):
        raise ValueError(
            f"grpo loss: logprobs {tuple(logprobs.shape)} must be [B, S-1] = "
            f"{(rows, seq - 1)} (next-token logprobs of input_ids {(rows, seq)})"
        )
    prev = batch.get("prev_logprobs")
    if prev is None:
        return logprobs.detach()
    if tuple(prev.shape) == (rows, seq):
        return prev[:, 1:]
    raise ValueError(
        f"grpo loss: batch['prev_logprobs'] {tuple(prev.shape)} must be [B, S] = "
        f"{(rows, seq)}, aligned with input_ids like get_logprobs() returns it "
        "(position 0 unused)"
    )


def per_token_loss(logprobs: torch.Tensor, batch: Batch, cfg: ClippedPGLossConfig) -> torch.Tensor:
    """[B, S-1] clipped surrogate of each next-token prediction (unmasked, no KL)."""
    old = previous_logprobs(logprobs, batch)
    clip_loss, _ = clipped_token_loss(logprobs, old, batch["advantages"].float(), cfg)
    return clip_loss


def _loss_sum_and_metrics(
    logprobs: torch.Tensor, batch: Batch, cfg: ClippedPGLossConfig
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    old = previous_logprobs(logprobs, batch)
    reference = batch.get("reference_policy_logprobs")
    generation = batch.get("generation_logprobs")
    return clipped_pg_loss(
        logprobs,
        old,
        None if reference is None else reference[:, 1:],
        batch["advantages"].float(),
        loss_mask(batch),
        cfg,
        global_valid_toks=1.0,
        global_valid_seqs=1.0,
        generation_logprobs=None if generation is None else generation[:, 1:],
    )


def loss_sum(logprobs: torch.Tensor, batch: Batch, cfg: ClippedPGLossConfig) -> torch.Tensor:
    """Un-normalised microbatch sum (normalisation factors 1) of `clipped_pg_loss`.

    Its gradient divided by the global `valid_count` is the loss's: the split train step
    divides once. The KL term reads ``batch["reference_policy_logprobs"]`` ([B, S], like
    ``prev_logprobs``); without it the loss has no KL term (allowed only at beta = 0).
    """
    return _loss_sum_and_metrics(logprobs, batch, cfg)[0]


class RecordingLossSum:
    """`loss_sum` bound to `cfg` that also keeps the raw metric sums of what it ran.

    The train step only sees the loss; NeMo-RL's per-microbatch metrics (``kl_penalty``,
    ...) come from the same call, with normalisation factors 1 like the loss. `take`
    returns the sums since the last `take`; divide each by the optimizer step's global
    count that `metric_normalizers` names (what NeMo-RL's split step does).
    """

    def __init__(self, cfg: ClippedPGLossConfig) -> None:
        self.cfg = cfg
        # Detached float64 sums on the loss's device: no host sync per microbatch; `take`
        # copies them to the host once per optimizer step.
        self._sums: dict[str, torch.Tensor] = {}

    def __call__(self, logprobs: torch.Tensor, batch: Batch) -> torch.Tensor:
        loss, metrics = _loss_sum_and_metrics(logprobs, batch, self.cfg)
        for name, value in metrics.items():
            value = value.detach().reshape(()).to(torch.float64)
            total = self._sums.get(name)
            self._sums[name] = value if total is None else total + value
        return loss

    def take(self) -> dict[str, float]:
        """Raw metric sums of the microbatches run since the last call; resets them."""
        sums, self._sums = self._sums, {}
        if not sums:
            return {}
        values = torch.stack(list(sums.values())).tolist()
        return dict(zip(sums, values, strict=True))


def loss_sum_fn(cfg: ClippedPGLossConfig) -> LossSumFn:
    """`loss_sum` bound to `cfg`: what the worker's train step differentiates."""
    return partial(loss_sum, cfg=cfg)


def worker_default_loss(config: ClippedPGLossConfig) -> LossSumFn:
    """The clipped policy-gradient sum without a KL term: the loss of a bare worker (tests,
    benchmarks), passed to it as `loss_sum_fn` (the worker does not import this package)."""
    return loss_sum_fn(policy_gradient_only(config))
