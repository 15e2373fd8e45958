"""ReferencePolicy's public state: what checkpoints save and restore, checked against the
model it is swapped into."""

from __future__ import annotations

import re

import pytest
import torch
from mcore_grpo.worker.policy_worker import MegatronPolicyWorker

from tests.integration.worker.harness import global_batch, make_worker, tiny_config


@pytest.fixture(scope="module")
def worker(module_world1: None) -> MegatronPolicyWorker:
    return make_worker(tiny_config(overlap=False))


def test_state_dict_is_the_initial_policy(worker: MegatronPolicyWorker) -> None:
    state = worker.reference.state_dict()
    live = {**dict(worker.policy.gpt.named_parameters()), **dict(worker.policy.gpt.named_buffers())}
    assert set(state) == set(live)
    assert all(t.device.type == "cpu" for t in state.values())
    assert all(torch.equal(state[n], live[n].detach().cpu()) for n in live)
    assert worker.reference.num_bytes == sum(t.numel() * t.element_size() for t in state.values())


def test_load_state_dict_swaps_in_the_given_weights(world1: None) -> None:
    """Loading the trained policy's weights as reference makes reference logprobs = policy's;
    the loaded tensors are copies (the caller's tensors stay theirs). Its own worker: it trains,
    and the module's worker must stay the initial policy for the tests in any order."""
    worker = make_worker(tiny_config(overlap=False))
    initial = {n: t.clone() for n, t in worker.reference.state_dict().items()}
    batch = global_batch(rows=4)
    worker.train(batch)
    worker.prepare_for_lp_inference()
    policy_lp = worker.get_logprobs(batch)
    assert not torch.allclose(worker.get_reference_policy_logprobs(batch), policy_lp)
    trained = {
        **dict(worker.policy.gpt.named_parameters()),
        **dict(worker.policy.gpt.named_buffers()),
    }
    given = {n: t.detach().clone() for n, t in trained.items()}
    worker.reference.load_state_dict(given)
    for tensor in given.values():
        tensor.zero_()
    assert torch.allclose(worker.get_reference_policy_logprobs(batch), policy_lp, atol=1e-6)
    worker.reference.load_state_dict(initial)
    assert all(torch.equal(worker.reference.state_dict()[n], initial[n]) for n in initial)


def test_load_state_dict_refuses_weights_of_another_model(worker: MegatronPolicyWorker) -> None:
    state = worker.reference.state_dict()
    name = next(iter(state))
    wrong_shape = {**state, name: torch.zeros(3, 1)}
    with pytest.raises(
        ValueError, match=rf"{re.escape(name)}: given \(3, 1\) torch\.float32, held"
    ):
        worker.reference.load_state_dict(wrong_shape)
    missing = {k: v for k, v in state.items() if k != name}
    with pytest.raises(ValueError, match=rf"{re.escape(name)}: given missing"):
        worker.reference.load_state_dict(missing)
    wrong_dtype = {**state, name: state[name].double()}
    with pytest.raises(ValueError, match=r"torch\.float64"):
        worker.reference.load_state_dict(wrong_dtype)
    assert worker.reference.state_dict()[name] is state[name], "a refused load changed state"
