"""Split train step: parity, communication volume, exception safety (DP=1 in process, DP=2 in
one 2-process spawn for the whole module)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
import torch
from mcore_grpo.config.loss import LossLevel
from mcore_grpo.worker.batch import Batch
from mcore_grpo.worker.comm_volume import count_gradient_reductions
from mcore_grpo.worker.cpu import cpu_device
from mcore_grpo.worker.model import sync_params
from mcore_grpo.worker.policy_worker import MegatronPolicyWorker

from tests.integration.worker.harness import (
    global_batch,
    independent_count,
    local_grad_diff,
    make_worker,
    param_diff,
    rank_slice,
    reference_loss,
    reference_step,
    spawn2,
    tiny_config,
)
from tests.support.device import MULTI_RANK_CPU, TEST_DEVICE
from tests.support.ports import free_port

TOL = 1e-6


def _parity(level: LossLevel, overlap: bool, k: int) -> dict[str, float]:
    """Split step over k chunks vs one-shot train vs plain PyTorch, on this rank's DP slice."""
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    batch = global_batch(rows=8)
    mine = rank_slice(batch, rank, world)
    out: dict[str, float] = {}
    results = {}
    for mode in ("split", "oneshot"):
        worker = make_worker(tiny_config(level=level, overlap=overlap))
        initial = {n: t.clone() for n, t in worker.reference.state_dict().items()}
        if mode == "split":
            worker.begin_train_step()
            rows = mine["input_ids"].shape[0]
            # k uneven chunks: 1 row, the middle, 1 row (k == 3), else the whole slice.
            bounds = [0, 1, rows - 1, rows] if k == 3 else [0, rows]
            for lo, hi in itertools.pairwise(bounds):
                worker.train_microbatch({n: t[lo:hi] for n, t in mine.items()})
            metrics = worker.finish_train_step()
        else:
            metrics = worker.train(mine)
        ref_grads, ref_params = reference_step(worker, initial, batch)
        out[f"{mode}_grad_diff"] = local_grad_diff(worker, ref_grads)
        with cpu_device(TEST_DEVICE):
            sync_params(worker.policy)
        out[f"{mode}_param_diff"] = param_diff(worker, ref_params)
        out[f"{mode}_moved"] = max(
            (p.detach() - initial[n].to(p.device)).abs().max().item()
            for n, p in worker.policy.gpt.named_parameters()
        )
        out[f"{mode}_global_valid"] = metrics["global_valid"]
        out[f"{mode}_global_loss"] = metrics["global_loss"]
        out[f"{mode}_reference_loss"] = reference_loss(worker, initial, batch)
        results[mode] = {n: p.detach().clone() for n, p in worker.policy.gpt.named_parameters()}
    out["expected_global_valid"] = independent_count(batch, level)
    out["split_vs_oneshot"] = max(
        (results["split"][n] - results["oneshot"][n]).abs().max().item() for n in results["split"]
    )
    return out


def _comm_volume(double_reduce: bool) -> float:
    """Gradient bytes reduced in one optimizer step / grad buffer bytes."""
    import torch.distributed as dist

    worker = make_worker(tiny_config(overlap=False))
    mine = rank_slice(global_batch(rows=8), dist.get_rank(), dist.get_world_size())
    ddp = worker.policy.ddp
    with count_gradient_reductions(ddp) as volume:
        if double_reduce:
            # The pitfall, by hand: start_grad_sync then finish_grad_sync, overlap off.
            with cpu_device(TEST_DEVICE):
                ddp.zero_grad_buffer()
                worker.train_step.begin()
                worker.train_step.train_microbatch(mine)
                ddp.start_grad_sync()
                ddp.finish_grad_sync()
                worker.train_step.abort()
        else:
            worker.train(mine)
    return volume.ratio


@dataclass(frozen=True)
class Dp2Results:
    """One rank's figures from the DP=2 spawn."""

    parity: dict[str, dict[str, float]]  # by loss level
    comm_ratio: float
    comm_ratio_double: float


def dp2_scenarios() -> Dp2Results:
    """Everything the module checks at DP=2, run in the one spawn."""
    return Dp2Results(
        parity={
            "token": _parity("token", overlap=True, k=3),
            "sequence": _parity("sequence", overlap=False, k=3),
        },
        comm_ratio=_comm_volume(double_reduce=False),
        comm_ratio_double=_comm_volume(double_reduce=True),
    )


@pytest.fixture(scope="module")
def dp2() -> dict[int, Dp2Results]:

    return spawn2(dp2_scenarios, free_port())


def _check(res: dict[str, float]) -> None:
    for mode in ("split", "oneshot"):
        assert res[f"{mode}_moved"] > 1e-4, "params did not move: comparison would be vacuous"
        assert res[f"{mode}_grad_diff"] < TOL, res
        assert res[f"{mode}_param_diff"] < TOL, res
        # The reported normaliser is the GLOBAL count of the level (all microbatches, all
        # ranks), counted by hand; the reported loss is the global batch's, on every rank.
        assert res[f"{mode}_global_valid"] == res["expected_global_valid"], res
        assert abs(res[f"{mode}_global_loss"] - res[f"{mode}_reference_loss"]) < TOL, res
    assert res["split_vs_oneshot"] < TOL, res


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("overlap", [True, False])
def test_parity_dp1(world1: None, level: LossLevel, overlap: bool) -> None:
    _check(_parity(level, overlap, k=3))


@pytest.mark.cpu_only(reason=MULTI_RANK_CPU)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_parity_dp2(dp2: dict[int, Dp2Results], level: str) -> None:
    for rank in (0, 1):
        _check(dp2[rank].parity[level])
    # The ranks hold different numbers of valid items; the normaliser is the global count.
    assert dp2[0].parity[level]["split_global_valid"] == dp2[1].parity[level]["split_global_valid"]


@pytest.mark.cpu_only(reason=MULTI_RANK_CPU)
def test_comm_volume_exactly_one_reduction(dp2: dict[int, Dp2Results]) -> None:
    for rank in (0, 1):
        assert dp2[rank].comm_ratio == pytest.approx(1.0, abs=1e-12)


@pytest.mark.cpu_only(reason=MULTI_RANK_CPU)
def test_comm_counter_sees_double_reduce(dp2: dict[int, Dp2Results]) -> None:
    for rank in (0, 1):
        assert dp2[rank].comm_ratio_double == pytest.approx(2.0, abs=1e-12)


def test_overlap_reduces_only_at_finish_never_in_a_microbatch(world1: None) -> None:
    """With overlap_grad_reduce, megatron's no-pipelining schedule runs its LAST microbatch
    outside `config.no_sync_func`, so the backward hooks start the gradient reduction
    mid-step unless the step nulls that hook. Spy on every bucket group's start_grad_sync:
    it must run for every group in finish (megatron's finish_grad_sync may call it again as a
    no-op), never during train_microbatch."""
    worker = make_worker(tiny_config(overlap=True, mbs=2))
    batch = global_batch(rows=8)
    worker.train(batch)  # megatron's first backward only records its grad-ready counts
    phase = ["microbatch"]
    calls: list[tuple[str, int]] = []
    groups = worker.policy.ddp.bucket_groups
    for index, group in enumerate(groups):
        original = group.start_grad_sync

        def spy(
            *args: object, _original: object = original, _i: int = index, **kwargs: object
        ) -> object:
            calls.append((phase[0], _i))
            return _original(*args, **kwargs)  # type: ignore[operator]

        group.start_grad_sync = spy
    worker.begin_train_step()
    worker.train_microbatch({k: v[:4] for k, v in batch.items()})
    worker.train_microbatch({k: v[4:] for k, v in batch.items()})
    assert calls == [], "gradients were reduced inside train_microbatch"
    phase[0] = "finish"
    worker.finish_train_step()
    assert {phase for phase, _ in calls} == {"finish"}
    assert {group for _, group in calls} == set(range(len(groups)))


class _Boom(RuntimeError):
    pass


def test_exception_in_microbatch_restores_hooks_and_next_step_is_correct(world1: None) -> None:
    worker = make_worker(tiny_config(overlap=True))
    cfg = worker.policy.transformer_config
    hooks = (cfg.grad_sync_func, cfg.no_sync_func, cfg.finalize_model_grads_func)
    batch = global_batch(rows=8)
    initial = {n: t.clone() for n, t in worker.reference.state_dict().items()}
    real_loss = worker.loss_sum_fn
    calls = {"n": 0}

    def flaky(logprobs: torch.Tensor, mb: Batch) -> torch.Tensor:
        calls["n"] += 1
        if calls["n"] == 2:
            raise _Boom("loss failed in microbatch 2")
        return real_loss(logprobs, mb)

    worker.loss_sum_fn = flaky
    worker.begin_train_step()
    with pytest.raises(_Boom):
        worker.train_microbatch(batch)
    assert (cfg.grad_sync_func, cfg.no_sync_func, cfg.finalize_model_grads_func) == hooks
    with pytest.raises(RuntimeError, match="abort_train_step"):
        worker.finish_train_step()
    worker.abort_train_step()
    worker.abort_train_step()  # idempotent
    worker.loss_sum_fn = real_loss
    worker.train(batch)
    ref_grads, ref_params = reference_step(worker, initial, batch)
    assert local_grad_diff(worker, ref_grads) < TOL
    with cpu_device(TEST_DEVICE):
        sync_params(worker.policy)
    assert param_diff(worker, ref_params) < TOL


def test_train_exception_aborts_and_double_begin_raises(world1: None) -> None:
    worker = make_worker(tiny_config(overlap=False))
    worker.loss_sum_fn = lambda lp, mb: (_ for _ in ()).throw(_Boom("x"))
    with pytest.raises(_Boom):
        worker.train(global_batch(rows=4))
    assert not worker.train_step.is_open
    worker.begin_train_step()
    with pytest.raises(RuntimeError, match="already open"):
        worker.begin_train_step()
    worker.abort_train_step()
    with pytest.raises(RuntimeError, match="begin_train_step"):
        worker.finish_train_step()


def test_loss_is_supplied_at_construction_and_fixed_within_a_step(world1: None) -> None:
    """The loss is API: a constructor argument or the `loss_sum_fn` property between steps,
    called once per microbatch with [B, S-1] logprobs and the microbatch rows."""
    seen: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def scaled(logprobs: torch.Tensor, mb: Batch) -> torch.Tensor:
        seen.append((tuple(logprobs.shape), tuple(mb["input_ids"].shape)))
        return 0.0 * logprobs.sum()  # no gradient: the step must leave the weights alone

    worker = make_worker(tiny_config(overlap=False, mbs=2), loss_sum_fn=scaled)
    assert worker.loss_sum_fn is scaled
    before = {n: p.detach().clone() for n, p in worker.policy.gpt.named_parameters()}
    metrics = worker.train(global_batch(rows=4))
    assert seen == [((2, 9), (2, 10)), ((2, 9), (2, 10))]
    assert metrics["global_loss"] == 0.0
    with cpu_device(TEST_DEVICE):
        sync_params(worker.policy)
    for name, param in worker.policy.gpt.named_parameters():
        assert torch.equal(param.detach(), before[name]), name
    worker.begin_train_step()
    with pytest.raises(RuntimeError, match="one optimizer step must differentiate one loss"):
        worker.loss_sum_fn = scaled
    worker.abort_train_step()
    worker.loss_sum_fn = scaled  # between steps: allowed


def test_worker_built_without_a_loss_refuses_to_train(world1: None) -> None:
    """The loss comes from above (the worker does not import `mcore_grpo.grpo`): a worker
    built without one says what to pass instead of training on something it chose."""
    worker = MegatronPolicyWorker(tiny_config(overlap=False))
    with pytest.raises(RuntimeError, match="worker_default_loss"):
        worker.train(global_batch(rows=4))
