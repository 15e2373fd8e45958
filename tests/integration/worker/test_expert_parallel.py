"""Expert parallelism is a tested layout: EP=2 equals EP=1 on the same weights and batch
(logprobs, reduced gradients, parameters after one distributed-optimizer step; the comparison
itself is `tests/integration/worker/ep_parity.py`)."""

from __future__ import annotations

import functools

import pytest

from tests.integration.worker.ep_parity import logprobs_grads_and_step, max_diff
from tests.integration.worker.harness import spawn_ranks
from tests.support.device import MULTI_RANK_CPU
from tests.support.ports import free_port

pytestmark = pytest.mark.cpu_only(reason=MULTI_RANK_CPU)


@pytest.mark.timeout(900)
def test_ep2_equals_ep1_in_logprobs_gradients_and_the_optimizer_step() -> None:
    ep1 = spawn_ranks(functools.partial(logprobs_grads_and_step, 1), free_port(), world=2)
    ep2 = spawn_ranks(
        functools.partial(logprobs_grads_and_step, 2, ep1[0]["initial"]), free_port(), world=2
    )
    for rank in (0, 1):
        a, b = ep1[rank], ep2[rank]
        figures = {
            "logprobs": max_diff({"lp": a["logprobs"]}, {"lp": b["logprobs"]}),
            "grads": max_diff(a["grads"], b["grads"]),
            "params": max_diff(a["after"], b["after"]),
            "moved": max_diff(a["initial"], {n: a["after"][n] for n in a["after"]}),
        }
        print(f"EP=2 vs EP=1, rank {rank}: max |diff| {figures}")
        experts = [n for n in b["grads"] if ".local_experts." in n]
        assert len(experts) == 2 * 2 * 2, experts  # 2 layers x 2 local experts x fc1, fc2
        assert figures["logprobs"] <= 1e-6
        assert figures["grads"] <= 1e-6
        assert figures["params"] <= 1e-6
        assert figures["moved"] > 1e-4, "the step did not move the weights"
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5)
