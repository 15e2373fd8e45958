"""Phase contract: every entry point, in every phase it is not allowed in, raises a
RuntimeError naming the call and the missing prepare step; allowed phases pass the guard."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from mcore_grpo.worker.generation import SamplingParams
from mcore_grpo.worker.phase_guard import Phase, PhaseGuard
from mcore_grpo.worker.policy_worker import MegatronPolicyWorker

from tests.integration.worker.harness import global_batch, make_worker, prompts, tiny_config

T, LP, GEN, OFF = Phase.TRAINING, Phase.LOGPROB_INFERENCE, Phase.GENERATION, Phase.OFFLOADED

# The contract, written out independently of the worker's decorators.
CONTRACT: dict[str, tuple[tuple[Phase, ...], Callable[[MegatronPolicyWorker], Any]]] = {
    "train": ((T,), lambda w: w.train(global_batch(rows=2))),
    "begin_train_step": ((T,), lambda w: w.begin_train_step()),
    "train_microbatch": ((T,), lambda w: w.train_microbatch(global_batch(rows=2))),
    "finish_train_step": ((T,), lambda w: w.finish_train_step()),
    "get_logprobs": ((LP, T), lambda w: w.get_logprobs(global_batch(rows=2))),
    "get_reference_policy_logprobs": (
        (LP, T),
        lambda w: w.get_reference_policy_logprobs(global_batch(rows=2)),
    ),
    "generate": ((GEN,), lambda w: w.generate(*prompts(rows=2), SamplingParams(max_new_tokens=1))),
    "finish_generation": ((GEN,), lambda w: w.finish_generation()),
    "offload_before_refit": ((T, LP, GEN), lambda w: w.offload_before_refit()),
    "offload_process_groups": ((OFF,), lambda w: w.offload_process_groups()),
}
STEP = {
    T: "prepare_for_training()",
    LP: "prepare_for_lp_inference()",
    GEN: "prepare_for_generation()",
    OFF: "offload_before_refit()",
}


@pytest.fixture(scope="module")
def worker(module_world1: None) -> MegatronPolicyWorker:
    return make_worker(tiny_config(overlap=True))


WRONG = [(name, phase) for name, (ok, _) in CONTRACT.items() for phase in Phase if phase not in ok]


@pytest.mark.parametrize(("name", "phase"), WRONG, ids=[f"{n}-{p.value}" for n, p in WRONG])
def test_wrong_phase_names_call_and_missing_step(
    worker: MegatronPolicyWorker, name: str, phase: Phase
) -> None:
    allowed, call = CONTRACT[name]
    worker.guard.enter(phase)
    with pytest.raises(RuntimeError) as err:
        call(worker)
    message = str(err.value)
    assert message.startswith(f"{name} called while")
    for p in allowed:
        assert STEP[p] in message
    if phase is OFF:
        assert "offloaded" in message


def test_allowed_phases_pass_the_guard() -> None:
    for name, (allowed, _) in CONTRACT.items():
        for phase in allowed:
            PhaseGuard(phase).require(name, *allowed)


def test_prepare_steps_make_entry_points_usable(worker: MegatronPolicyWorker) -> None:
    worker.guard.enter(T)
    batch = global_batch(rows=2)
    worker.offload_before_refit()
    with pytest.raises(RuntimeError, match="offloaded; call prepare_for_lp_inference"):
        worker.get_logprobs(batch)
    worker.prepare_for_lp_inference()
    assert worker.get_logprobs(batch).shape == batch["input_ids"].shape
    worker.prepare_for_generation()
    out = worker.generate(*prompts(rows=2), SamplingParams(max_new_tokens=2))
    assert out.output_ids.shape[0] == 2
    worker.finish_generation()
    worker.prepare_for_training()
    assert worker.train(batch)["update_successful"] == 1.0
    assert isinstance(worker.get_logprobs(batch), torch.Tensor)
