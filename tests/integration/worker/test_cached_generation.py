"""The KV-cache sampler (megatron-core's StaticInferenceContext) against the recompute sampler
(full forward per token, the reference) and against fresh forwards of what it generated.

Expectations never come from the code under test: token equality is against the recompute
path (a different forward: whole prefix, no cache), logprobs against `reference_logits` (the
dense-mask oracle) over the generated sequence, left padding against each prompt decoded alone
without padding.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from mcore_grpo.worker.config import ModelConfig
from mcore_grpo.worker.cpu import cpu_device
from mcore_grpo.worker.generation import (
    GenerationOutput,
    SamplingParams,
    generate,
    resolve_backend,
)

from tests.integration.worker.harness import GREEDY, VOCAB, make_worker, prompts, tiny_config
from tests.integration.worker.harness import REAL_VOCAB as REAL
from tests.integration.worker.harness import assert_same_generation as _assert_same
from tests.support.dense_reference import reference_logits
from tests.support.device import TEST_DEVICE


@pytest.fixture(scope="module")
def model(module_world1: None) -> torch.nn.Module:
    cfg = dataclasses.replace(
        tiny_config(overlap=False),
        model=ModelConfig(vocab_size=REAL, padded_vocab_size_override=VOCAB),
    )
    worker = make_worker(cfg)
    worker.prepare_for_generation()
    worker.policy.ddp.eval()
    return worker.policy.ddp


def _run(
    model: torch.nn.Module,
    ids: torch.Tensor,
    mask: torch.Tensor,
    backend: str,
    seed: int = 0,
    **params: object,
) -> GenerationOutput:
    sp = SamplingParams(backend=backend, **params)  # type: ignore[arg-type]
    with cpu_device(TEST_DEVICE):
        return generate(model, ids, mask, sp, REAL, torch.Generator().manual_seed(seed))


def _fresh_logprobs(
    model: torch.nn.Module, out: GenerationOutput, temperature: float
) -> torch.Tensor:
    """[B, S-1] logprob of output_ids[:, 1:] from one full forward, real vocab, tempered."""
    ids = out.output_ids
    with cpu_device(TEST_DEVICE), torch.no_grad():
        logits = reference_logits(model, ids, out.attention_mask)[..., :REAL] / temperature
    return torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def test_rope_cached_equals_recompute(rope_model: torch.nn.Module) -> None:
    """With rope the cache holds rotated keys (patches/Megatron-LM
    cache-rotated-keys-in-static-batching-inference.patch); greedy tokens and logprobs are
    still the recompute path's, over 20 steps."""
    ids, mask = prompts(rows=6, length=7, vocab=REAL)
    kw = {"temperature": GREEDY, "max_new_tokens": 20}
    cached = _run(rope_model, ids, mask, "static_cache", **kw)
    _assert_same(cached, _run(rope_model, ids, mask, "recompute", **kw), GREEDY)
    assert len(set(cached.output_ids[:, 7:].flatten().tolist())) > 4
    sampled = {"temperature": 1.0, "max_new_tokens": 20}
    _assert_same(
        _run(rope_model, ids, mask, "static_cache", seed=5, **sampled),
        _run(rope_model, ids, mask, "recompute", seed=5, **sampled),
    )


def test_default_backend_is_the_static_cache(model: torch.nn.Module) -> None:
    assert resolve_backend(model, SamplingParams())[0] == "static_cache"


def test_greedy_cached_equals_recompute_token_for_token(model: torch.nn.Module) -> None:
    ids, mask = prompts(rows=6, length=7, vocab=REAL)
    kw = {"temperature": GREEDY, "max_new_tokens": 16}
    cached = _run(model, ids, mask, "static_cache", **kw)
    reference = _run(model, ids, mask, "recompute", **kw)
    assert cached.output_ids.shape == (6, 7 + 16)
    _assert_same(cached, reference, GREEDY)
    # Not vacuous: greedy on a random model still varies across rows and steps.
    assert len(set(cached.output_ids[:, 7:].flatten().tolist())) > 4


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_sampling_with_a_fixed_generator_equals_recompute(
    model: torch.nn.Module, top_p: float
) -> None:
    ids, mask = prompts(rows=6, length=7, vocab=REAL)
    kw = {"temperature": 1.0, "top_p": top_p, "max_new_tokens": 16}
    cached = _run(model, ids, mask, "static_cache", seed=13, **kw)
    reference = _run(model, ids, mask, "recompute", seed=13, **kw)
    _assert_same(cached, reference)
    other_seed = _run(model, ids, mask, "static_cache", seed=14, **kw)
    assert not torch.equal(cached.output_ids, other_seed.output_ids), "the draw is not random"


def test_left_padding_is_invisible_under_the_cache(model: torch.nn.Module) -> None:
    """Each row of a left-padded batch (prompt lengths 2..7) generates what the same prompt
    generates alone, unpadded: positions and masks are right under the cache."""
    ids, mask = prompts(rows=6, length=7, vocab=REAL)
    assert len(set(mask.sum(dim=1).tolist())) > 3, "prompts must have different lengths"
    kw = {"temperature": GREEDY, "max_new_tokens": 10}
    batched = _run(model, ids, mask, "static_cache", **kw)
    for row in range(6):
        alone_ids = ids[row, mask[row].bool()][None, :]
        alone = _run(model, alone_ids, torch.ones_like(alone_ids), "static_cache", **kw)
        assert torch.equal(alone.output_ids[0, -10:], batched.output_ids[row, -10:]), row
        diff = (alone.logprobs[0, -10:] - batched.logprobs[row, -10:]).abs().max()
        assert float(diff) * GREEDY <= 1e-5, row  # at the logit scale, as _assert_same


def test_stop_tokens_end_rows_mid_batch(model: torch.nn.Module) -> None:
    ids, mask = prompts(rows=6, length=7, vocab=REAL)
    kw = {"temperature": 1.0, "max_new_tokens": 12}
    free = _run(model, ids, mask, "static_cache", seed=5, **kw)
    # A token row 2 samples at step 3 (not earlier in that row) becomes the stop token.
    row2 = free.output_ids[2, 7:].tolist()
    stop = next(t for i, t in enumerate(row2) if i >= 2 and t not in row2[:i])
    step = row2.index(stop)
    cached = _run(model, ids, mask, "static_cache", seed=5, stop_token_ids=(stop,), **kw)
    reference = _run(model, ids, mask, "recompute", seed=5, stop_token_ids=(stop,), **kw)
    _assert_same(cached, reference)
    lengths = cached.generation_lengths.tolist()
    assert lengths[2] == step + 1
    assert max(lengths) > step + 1, "other rows must go on after row 2 stopped"
    tail = slice(7 + step + 1, None)
    assert torch.all(cached.generated_mask[2, tail] == 0)
    assert torch.all(cached.attention_mask[2, tail] == 0)
    assert torch.all(cached.logprobs[2, tail] == 0)
    assert torch.all(cached.output_ids[2, tail] == 0)  # the pad id


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_returned_logprobs_equal_a_fresh_forward(
    model: torch.nn.Module, temperature: float
) -> None:
    ids, mask = prompts(rows=6, length=7, vocab=REAL)
    out = _run(
        model, ids, mask, "static_cache", seed=21, temperature=temperature, max_new_tokens=16
    )
    sel = out.generated_mask.bool()
    assert int(sel.sum()) == 6 * 16
    assert int(out.output_ids[sel].max()) < REAL, "a padded-vocab id was sampled"
    fresh = _fresh_logprobs(model, out, temperature)
    diff = (out.logprobs[:, 1:][sel[:, 1:]] - fresh[sel[:, 1:]]).abs().max()
    assert float(diff) <= 1e-5, float(diff)


def test_dynamic_engine_backend_says_why_it_does_not_run(model: torch.nn.Module) -> None:
    ids, mask = prompts(rows=1)
    with pytest.raises(NotImplementedError, match="flash-attn"):
        _run(model, ids, mask, "mcore_dynamic_engine")


def test_tp2_generates_the_same_tokens_as_tp1(world1: None) -> None:
    from tests.integration.worker.tp_generation import compare_tp2_with_tp1

    figures = compare_tp2_with_tp1()
    assert figures["ranks_agree"], "the two TP ranks sampled different tokens"
    for case in ("greedy", "sampled"):
        assert figures[f"{case}_tokens_equal"], figures
        assert figures[f"{case}_tp1_cached_equal"], figures
        assert figures[f"{case}_logprob_max_abs_diff"] <= 1e-5, figures
        assert figures[f"{case}_distinct_tokens"] > 4, "vacuous: the model repeats one token"


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs CUDA: the cached sampler on a CUDA model (passed on an H200; "
    "benchmarks/device/gpu_check.sh)",
)
def test_cached_equals_recompute_on_cuda(world1: None) -> None:
    """The same code path on CUDA: greedy cached == recompute, tensors on the model's device."""
    from mcore_grpo.worker.config import WorkerConfig
    from mcore_grpo.worker.cpu import model_parallel_seed
    from mcore_grpo.worker.model import build_gpt
    from mcore_grpo.worker.parallel import init_model_parallel

    cfg = WorkerConfig(
        device="cuda", model=ModelConfig(vocab_size=REAL, padded_vocab_size_override=VOCAB)
    )
    init_model_parallel(cfg)
    model_parallel_seed(cfg.seed, "cuda")
    _, gpt = build_gpt(cfg)
    gpt.eval()
    ids, mask = prompts(rows=6, length=7, vocab=REAL)
    gen = torch.Generator(device="cuda")
    outs = [
        generate(
            gpt,
            ids,
            mask,
            SamplingParams(backend=b, temperature=GREEDY, max_new_tokens=16),
            REAL,
            gen.manual_seed(0),
        )
        for b in ("static_cache", "recompute")
    ]
    assert outs[0].output_ids.device.type == "cuda"
    _assert_same(outs[0], outs[1], GREEDY)
