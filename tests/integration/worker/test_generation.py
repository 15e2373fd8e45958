"""Batched sampling: left padding is invisible, stop tokens end rows, padded-vocab ids are
never sampled, returned logprobs equal the policy's logprobs of the sampled tokens."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest
import torch
from mcore_grpo.worker.config import ModelConfig
from mcore_grpo.worker.cpu import cpu_device
from mcore_grpo.worker.generation import SamplingParams
from mcore_grpo.worker.model import sync_params
from mcore_grpo.worker.policy_worker import MegatronPolicyWorker

from tests.integration.worker.harness import (
    VOCAB,
    global_batch,
    make_worker,
    prompts,
    seeded,
    tiny_config,
)
from tests.support.dense_reference import reference_logits
from tests.support.device import TEST_DEVICE

REAL = VOCAB - 8


def real_vocab_logprobs(
    worker: MegatronPolicyWorker, ids: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """[B, S-1] logprobs of ids[:, 1:] under the policy restricted to the tokenizer vocab."""
    with cpu_device(TEST_DEVICE), torch.no_grad():
        logits = reference_logits(worker.policy.ddp, ids, mask)[..., :REAL]
    return torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


@pytest.fixture(scope="module")
def worker(module_world1: None) -> MegatronPolicyWorker:
    from megatron.core.models.gpt import GPTModel

    cfg = dataclasses.replace(
        tiny_config(overlap=False),
        model=ModelConfig(vocab_size=VOCAB - 8, padded_vocab_size_override=VOCAB),
    )
    w = make_worker(cfg)
    gpt = w.policy.gpt
    assert isinstance(gpt, GPTModel)
    weight = gpt.output_layer.weight  # None only with a weight supplied at call time
    assert weight is not None
    # Make the padded-vocab rows the most likely tokens, so masking is what keeps them out.
    with torch.no_grad():
        weight[VOCAB - 8 :] = 0.0
    w.prepare_for_generation()
    return w


def test_padded_vocab_never_sampled_and_logprobs_match_policy(worker: MegatronPolicyWorker) -> None:
    ids, mask = prompts(rows=4, length=5, vocab=REAL)
    out = worker.generate(ids, mask, SamplingParams(max_new_tokens=4), seeded(1))
    sel = out.generated_mask.bool()
    assert int(sel.sum()) == 16 and int(out.output_ids[sel].max()) < REAL
    expected = real_vocab_logprobs(worker, out.output_ids, out.attention_mask)
    assert torch.allclose(out.logprobs[:, 1:][sel[:, 1:]], expected[sel[:, 1:]], atol=1e-5)


def test_left_padding_is_invisible(worker: MegatronPolicyWorker) -> None:
    ids, mask = prompts(rows=4, length=5, vocab=REAL)
    padded = worker.generate(ids, mask, SamplingParams(max_new_tokens=3), seeded(7))
    for row in range(4):
        keep = mask[row].bool()
        generated = padded.output_ids[row, 5:]
        seq = torch.cat([ids[row, keep].to(generated.device), generated])[None, :]
        alone = real_vocab_logprobs(worker, seq, torch.ones_like(seq))
        assert torch.allclose(alone[0, -3:], padded.logprobs[row, 5:], atol=1e-5), row
    assert int((~mask.bool()).sum()) > 0, "the prompts must include left padding"


def test_stop_tokens_end_rows(worker: MegatronPolicyWorker) -> None:
    ids, mask = prompts(rows=4, length=5, vocab=REAL)
    first = worker.generate(ids, mask, SamplingParams(max_new_tokens=1), seeded(5))
    stop = int(first.output_ids[0, -1])
    out = worker.generate(
        ids,
        mask,
        SamplingParams(max_new_tokens=6, stop_token_ids=(stop,)),
        seeded(5),
    )
    assert int(out.generation_lengths[0]) == 1  # row 0 sampled the stop token first
    assert torch.all(out.generated_mask[0, 6:] == 0) and torch.all(out.logprobs[0, 6:] == 0)


def test_dynamic_engine_backend_is_explicitly_not_implemented(worker: MegatronPolicyWorker) -> None:
    ids, mask = prompts(rows=1)
    with pytest.raises(NotImplementedError, match=r"DynamicInferenceEngine.*flash-attn"):
        worker.generate(ids, mask, SamplingParams(backend="mcore_dynamic_engine"))


def test_logprob_forward_matches_the_sampler_over_padded_vocab(
    worker: MegatronPolicyWorker,
) -> None:
    """get_logprobs (the forward the loss trains through) normalises over the same real ids
    as the sampler: the trained distribution is the sampled one (temperature 1)."""
    ids, mask = prompts(rows=4, length=5, vocab=REAL)
    out = worker.generate(ids, mask, SamplingParams(max_new_tokens=4), seeded(11))
    worker.finish_generation()
    try:
        lp = worker.get_logprobs(
            {"input_ids": out.output_ids, "attention_mask": out.attention_mask}
        )
    finally:
        worker.prepare_for_generation()
    sel = out.generated_mask.bool()
    assert int(sel.sum()) == 16
    assert torch.allclose(lp[sel], out.logprobs[sel], atol=1e-5)


def test_training_never_moves_padded_vocab_rows(world1: None) -> None:
    """A train step gives the padded output rows no gradient (Adam would move them ~lr)."""
    from megatron.core.models.gpt import GPTModel

    cfg = dataclasses.replace(
        tiny_config(overlap=False),
        model=ModelConfig(vocab_size=REAL, padded_vocab_size_override=VOCAB),
    )
    w = make_worker(cfg)
    gpt = w.policy.gpt
    assert isinstance(gpt, GPTModel)
    weight = gpt.output_layer.weight
    assert weight is not None
    before = weight.detach().clone()
    batch = global_batch(rows=4)
    batch["input_ids"] = batch["input_ids"] % REAL
    w.train(batch)
    with cpu_device(TEST_DEVICE):
        sync_params(w.policy)
    moved = (weight.detach() - before).abs().amax(dim=1)
    assert float(moved[:REAL].min()) > 0.0, "real rows did not train: the check is vacuous"
    assert float(moved[REAL:].max()) == 0.0


def test_logprob_and_training_forwards_score_at_the_sampling_temperature(world1: None) -> None:
    """At T != 1 the logprob forward and the training forward score the tempered distribution
    the tokens were drawn from (NeMo-RL's apply_temperature_scaling); a sample drawn at another
    temperature is refused rather than silently mis-scored."""
    cfg = dataclasses.replace(
        tiny_config(overlap=False),
        model=ModelConfig(vocab_size=REAL, padded_vocab_size_override=VOCAB),
        temperature=0.5,
    )
    w = make_worker(cfg)
    w.prepare_for_generation()
    ids, mask = prompts(rows=4, length=5, vocab=REAL)
    with pytest.raises(ValueError, match=r"SamplingParams.temperature=1.0 but WorkerConfig"):
        w.generate(ids, mask, SamplingParams(max_new_tokens=4))
    out = w.generate(
        ids,
        mask,
        SamplingParams(temperature=0.5, max_new_tokens=4),
        seeded(3),
    )
    w.finish_generation()
    batch = {"input_ids": out.output_ids, "attention_mask": out.attention_mask}
    lp = w.get_logprobs(batch)
    sel = out.generated_mask.bool()
    assert torch.allclose(lp[sel], out.logprobs[sel], atol=1e-5)
    at_t1 = torch.cat(
        [torch.zeros(4, 1, device=lp.device), real_vocab_logprobs(w, *batch.values())], dim=1
    )
    assert float((at_t1[sel] - lp[sel]).abs().max()) > 1e-3, "T=0.5 must differ from T=1"

    seen: list[torch.Tensor] = []

    def capture(logprobs: torch.Tensor, mb: Mapping[str, torch.Tensor]) -> torch.Tensor:
        seen.append(logprobs.detach().clone())
        return (logprobs * out.generated_mask[: logprobs.shape[0], 1:]).sum() * 0.0

    w.loss_sum_fn = capture
    w.prepare_for_training()
    rows = out.output_ids.shape[0]
    w.train(
        {
            **batch,
            "token_mask": out.generated_mask.float(),
            "sample_mask": torch.ones(rows),
            "advantages": torch.zeros(rows),
            "prev_logprobs": lp,
        }
    )
    trained = torch.cat(seen, dim=0)
    assert torch.allclose(trained[sel[:, 1:]], lp[:, 1:][sel[:, 1:]], atol=1e-5)


def test_a_groups_samples_do_not_depend_on_the_groups_batched_with_it(
    worker: MegatronPolicyWorker,
) -> None:
    """One generate call over two prompt groups (different prompt lengths, left-padded), each
    with its own generator, samples each group exactly as a call of that group alone does."""
    from mcore_grpo.worker.sampling import GroupGenerators

    params = SamplingParams(max_new_tokens=4)
    first = torch.tensor([[3, 9, 4, 1, 7]] * 3)
    second = torch.tensor([[0, 0, 5, 2, 8]] * 3)
    second_mask = torch.tensor([[0, 0, 1, 1, 1]] * 3)
    both = worker.generate(
        torch.cat([first, second]),
        torch.cat([torch.ones_like(first), second_mask]),
        params,
        GroupGenerators((seeded(11), seeded(12)), 3),
    )
    alone = [
        worker.generate(first, torch.ones_like(first), params, seeded(11)),
        worker.generate(second[:, 2:], torch.ones_like(second[:, 2:]), params, seeded(12)),
    ]
    assert torch.equal(both.output_ids[:3, 5:], alone[0].output_ids[:, 5:])
    assert torch.equal(both.output_ids[3:, 5:], alone[1].output_ids[:, 3:])
    assert torch.allclose(both.logprobs[3:, 5:], alone[1].logprobs[:, 3:], atol=1e-5)
    with pytest.raises(ValueError, match=r"1 generators x 3 rows do not cover a batch of 6"):
        worker.generate(
            torch.cat([first, first]),
            torch.ones(6, 5, dtype=torch.long),
            params,
            GroupGenerators((seeded(1),), 3),
        )
