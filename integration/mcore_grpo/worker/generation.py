"""Batched sampling with the policy itself: one interface, the backend chosen by
`SamplingParams.backend`.

- "static_cache" (default): megatron-core's `StaticInferenceContext`, a prefill then one-token
  decode steps over the KV cache (`static_cache_sampler.py`); per-token cost independent of
  the length generated so far. Rows that repeat a prompt (a GRPO group) share one prefill
  and copies of its cache (`shared_prefill.py`).
  Models with Mamba-2 or gated delta net layers decode through their recurrent state the same
  way, prompts fed unpadded (`state_sampler.py`).
- "recompute": re-runs the whole prefix per token (`recompute_sampler.py`); the reference the
  cached path is tested against, and the fallback where the cache cannot run (sequence
  parallelism; the log says so).
- "mcore_dynamic_engine": megatron-core's `DynamicInferenceEngine`, the engine NeMo-RL's
  `backend=megatron` runs. Not implemented: its dynamic-batching attention needs flash-attn's
  kernels on a GPU, which this project has never had to run or test it on. Selecting it raises
  NotImplementedError saying why. The engine's suspend/resume lifecycle around weight updates
  IS implemented (`engine_lifecycle.py`, attached as `MegatronPolicyWorker(generation_engine=
  ...)`), so an engine sampler would plug in here and share that lifecycle.

All backends share `sampling.py`: temperature, top-p, stop tokens, left-padded prompts, ids at
or beyond the tokenizer vocab never sampled, and the logprob of each sampled token under the
temperature-scaled distribution.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable

import torch

from mcore_grpo.worker.forward import has_recurrent_layers
from mcore_grpo.worker.recompute_sampler import generate_recompute
from mcore_grpo.worker.sampling import (
    DYNAMIC_ENGINE,
    RECOMPUTE,
    STATIC_CACHE,
    GenerationOutput,
    SamplingGenerator,
    SamplingParams,
    model_device,
)
from mcore_grpo.worker.state_sampler import generate_through_state
from mcore_grpo.worker.static_cache_sampler import cache_unsupported_reason, generate_static_cache

__all__ = ["GenerationOutput", "SamplingParams", "generate", "resolve_backend"]

LOG = logging.getLogger(__name__)
Sampler = Callable[
    [torch.nn.Module, torch.Tensor, torch.Tensor, SamplingParams, int, SamplingGenerator],
    GenerationOutput,
]
_SAMPLERS: dict[str, Sampler] = {STATIC_CACHE: generate_static_cache, RECOMPUTE: generate_recompute}
_LOGGED: set[tuple[str, str]] = set()


def dynamic_engine_unavailable_reason() -> str:
    """Why `backend="mcore_dynamic_engine"` raises, for this machine."""
    missing = []
    if not torch.cuda.is_available():
        missing.append("no CUDA device")
    if importlib.util.find_spec("flash_attn") is None:
        missing.append("flash-attn not installed")
    here = f" (here: {', '.join(missing)})" if missing else ""
    return (
        "the megatron-core DynamicInferenceEngine sampler is not implemented: its "
        "dynamic-batching attention needs flash-attn's kernels on a GPU, and this worker has "
        f"never run on one{here}. Its suspend/resume lifecycle is wired (engine_lifecycle.py). "
        "Use backend='static_cache' (megatron-core's StaticInferenceContext, same KV-cache "
        "decode) or 'recompute'."
    )


def resolve_backend(model: torch.nn.Module, params: SamplingParams) -> tuple[str, str]:
    """(backend that will run, why) for `params.backend` on this model."""
    params.validate()
    if params.backend == DYNAMIC_ENGINE:
        raise NotImplementedError(
            f"SamplingParams.backend={DYNAMIC_ENGINE!r}: {dynamic_engine_unavailable_reason()}"
        )
    if params.backend == STATIC_CACHE:
        reason = cache_unsupported_reason(model)
        if reason is not None:
            return RECOMPUTE, f"static_cache unavailable ({reason}); falling back to recompute"
        if has_recurrent_layers(model):
            return STATIC_CACHE, (
                "megatron-core StaticInferenceContext, recurrent state and KV cache, "
                "prompts fed unpadded"
            )
        return STATIC_CACHE, "megatron-core StaticInferenceContext, KV cache"
    return RECOMPUTE, "recompute requested (full prefix forward per token, no KV cache)"


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    params: SamplingParams,
    vocab_size: int,
    generator: SamplingGenerator = None,
) -> GenerationOutput:
    """Sample up to `max_new_tokens` per row with the backend `params.backend` selects; a row
    stops after a stop token. Inputs are moved to the model's device; outputs stay there."""
    backend, why = resolve_backend(model, params)
    device = model_device(model)
    if (backend, why) not in _LOGGED:  # once per process and choice: the log says which runs
        _LOGGED.add((backend, why))
        LOG.info("generation backend: %s on %s (%s)", backend, device, why)
    sampler = _SAMPLERS[backend]
    if backend == STATIC_CACHE and has_recurrent_layers(model):
        sampler = generate_through_state
    return sampler(
        model,
        prompt_ids.to(device),
        prompt_mask.to(device),
        params,
        vocab_size,
        generator,
    )
