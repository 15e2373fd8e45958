"""Tripwire of patches/NeMo-RL/dtensor-split-train-step.patch (DTensor v1 and v2 workers).

NeMo-RL's `TQWorkerMixin.begin_train_step_presharded` calls `begin_train_step(loss_fn=, gbs=,
mbs=)` and later `train_microbatch(data=)` / `finish_train_step()` / `abort_train_step()` on
whichever worker it is mixed into; at the pin only the Megatron worker has them.

For each DTensor worker (v1 `DTensorPolicyWorkerImpl`, v2 `DTensorPolicyWorkerV2Impl`), two gloo
ranks (DP = 2, spawned processes, CPU) each build the same tiny Llama causal LM locally
(transformers config, no hub), sharded with FSDP2 `fully_shard` per decoder layer and at the
root, as the workers' parallelizers do. Two bare workers (NeMo-RL's real class from
3rdparty/NeMo-RL, built with `object.__new__` plus the state `train()` reads) train the same
global batch (16 sequences, 8 per rank, microbatch 2, one padded sample, random token masks)
with NeMo-RL's real `ClippedPGLossFn`, token- and sequence-level: one with the one-shot
`train()`, one with `begin_train_step` + `train_microbatch` x 2 (4 sequences each) +
`finish_train_step`. Two steps; before the second split step a `train_microbatch` raises in its
second microbatch, `abort_train_step_presharded` and `abort_train_step` run (the second is a
no-op), and the step runs through the mixin's `begin_train_step_presharded` /
`finish_train_step_presharded`.

Checked: parameters after each step equal (max abs diff <= 1e-6; SGD, so the difference is the
gradient difference times the lr), every metric `train()` reports equal (<= 1e-6), the global
loss and grad norm equal, and the gradients reduced once per step: FSDP2's `foreach_reduce`
is counted (one call per FSDP parameter group per reduction).

Doubles: `Tensor.cuda`/`.to("cuda")`/`device="cuda"` map to the CPU through the project's
`mcore_grpo.worker.cpu.cpu_device`; `torch.cuda.get_device_name` returns "cpu"; the worker
modules are imported with heavy_import_stubs.py's stubs (no stubbed code runs on these paths:
the model, FSDP2, the loss, the grad norm and clipping are real). v2's training loop runs
nemo_automodel code, so v2 is imported with the real nemo-automodel 0.4.0 (the
`nemo-rl-automodel` dependency group; one documented import workaround, automodel_imports.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcore_grpo.grpo.nemo_rl.automodel_compat import automodel_installed

from tests.patches.nemo_rl.automodel_imports import MISSING_REASON
from tests.support.python_process import run_ranks

pytestmark = [
    pytest.mark.nemo_rl,
    pytest.mark.cpu_only(
        reason="2 gloo ranks running FSDP2 on CPU under the mcore_grpo.worker.cpu redirects, which refuse where CUDA exists"
    ),
]

REPO_ROOT = Path(__file__).resolve().parents[3]
TOL = 1e-6

_SCRIPT = r"""
import importlib, json, os, sys
from types import SimpleNamespace

port, rank, nemo_rl_root, repo_root, kind = sys.argv[1:6]
rank = int(rank)
# This project's `tests` package first: NeMo-RL's checkout has a `tests` package of its own.
sys.path.insert(0, repo_root)
from tests.patches.nemo_rl.heavy_import_stubs import stubbed_imports
sys.path.insert(0, nemo_rl_root)
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)

import torch
import torch.distributed as dist
import torch.distributed.fsdp._fully_shard._fsdp_param_group as fsdp_param_group
import transformers
from mcore_grpo.worker.cpu import cpu_device
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

if kind == "v2":
    from tests.patches.nemo_rl.automodel_imports import import_v2_worker

    wmod = import_v2_worker()
    worker_class = wmod.DTensorPolicyWorkerV2Impl
else:
    with stubbed_imports():
        wmod = importlib.import_module("nemo_rl.models.policy.workers.dtensor_policy_worker")
    worker_class = wmod.DTensorPolicyWorkerImpl
from nemo_rl.algorithms.loss.loss_functions import ClippedPGLossConfig, ClippedPGLossFn
from nemo_rl.distributed.batched_data_dict import BatchedDataDict

dist.init_process_group("gloo", rank=rank, world_size=2)
mesh = init_device_mesh("cpu", (2, 1, 1), mesh_dim_names=("dp", "cp", "tp"))

# Count gradient reductions: FSDP2 reduce-scatters one parameter group per foreach_reduce.
REDUCTIONS = [0]
_foreach_reduce = fsdp_param_group.foreach_reduce


def counting_foreach_reduce(*args, **kwargs):
    REDUCTIONS[0] += 1
    return _foreach_reduce(*args, **kwargs)


fsdp_param_group.foreach_reduce = counting_foreach_reduce
VOCAB = 32


def build_model():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
    )
    model = transformers.LlamaForCausalLM(config)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return model


def bare_worker(model):
    w = object.__new__(worker_class)
    w.model = model
    w.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    w.scheduler = torch.optim.lr_scheduler.LambdaLR(w.optimizer, lambda step: 1.0)
    w._weights_offloaded = False
    w.timer = SimpleNamespace(start=lambda *_: None, stop=lambda *_: None)
    w.cfg = {
        "train_global_batch_size": 16, "train_micro_batch_size": 2,
        "dynamic_batching": {"enabled": False}, "dtensor_cfg": {"sequence_parallel": False},
        "sequence_packing": {"enabled": False},
    }
    w.dp_size, w.cp_size, w.tp_size = 2, 1, 1
    w.device_mesh, w.dp_mesh, w.cp_mesh, w.tp_mesh = mesh, mesh["dp"], mesh["cp"], mesh["tp"]
    w.dp_cp_mesh = mesh["dp"]  # cp = 1
    w.enable_seq_packing = False
    w.is_gemma3 = False
    w._is_reward_model = False
    w.sampling_params = None
    w.dtype = torch.float32
    w.max_grad_norm = 1.0
    # v2 only (its train() reads them; v1 ignores them)
    w.moe_mesh = None
    w.tokenizer = None  # read only for sequence packing's padding value
    w.allow_flash_attn_args = True
    w.autocast_enabled = True
    return w


def local_batch(step):
    g = torch.Generator().manual_seed(100 * step + rank)
    b, s = 8, 6
    token_mask = (torch.rand(b, s, generator=g) > 0.3).float()
    token_mask[:, 0] = 0
    sample_mask = torch.ones(b)
    sample_mask[3] = 0
    return BatchedDataDict({
        "input_ids": torch.randint(0, VOCAB, (b, s), generator=g),
        "input_lengths": torch.full((b,), s),
        "token_mask": token_mask,
        "sample_mask": sample_mask,
        "advantages": torch.randn(b, s, generator=g),
        "prev_logprobs": -4 * torch.rand(b, s, generator=g),
        "generation_logprobs": -4 * torch.rand(b, s, generator=g),
        "reference_policy_logprobs": -4 * torch.rand(b, s, generator=g),
    })


def full_params(w):
    return torch.cat([p.full_tensor().flatten() for p in w.model.parameters()])


class RaisesAfter:
    # The loss, raising from its (after+1)-th call on.
    def __init__(self, inner, after):
        self.inner, self.after, self.calls = inner, after, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls > self.after:
            raise RuntimeError("loss failed on purpose")
        return self.inner(*args, **kwargs)


def metric_diffs(a, b):
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    out = {}
    for k in a:
        x = torch.tensor([float(v) for v in a[k]], dtype=torch.float64)
        y = torch.tensor([float(v) for v in b[k]], dtype=torch.float64)
        assert x.shape == y.shape, (k, x, y)
        out[k] = float((x - y).abs().max())
    return out


torch.cuda.get_device_name = lambda *args: "cpu"
result = {"rank": rank, "file": wmod.__file__, "class": worker_class.__name__}
with cpu_device("cpu"):
    for level, cfg in (("token", ClippedPGLossConfig()),
                       ("sequence", ClippedPGLossConfig(token_level_loss=False))):
        loss_fn = ClippedPGLossFn(cfg)
        one_shot, split = bare_worker(build_model()), bare_worker(build_model())
        r = {"loss_type": str(loss_fn.loss_type), "param_diff": [], "metric_diff": [],
             "global_loss_diff": [], "grad_norm_diff": [], "reductions_train": [],
             "reductions_split": [], "exception": None}
        for step in range(2):
            data = local_batch(step)
            REDUCTIONS[0] = 0
            m1 = one_shot.train(data, loss_fn, gbs=16, mbs=2)
            r["reductions_train"].append(REDUCTIONS[0])
            if step == 1:
                split.begin_train_step(RaisesAfter(loss_fn, after=1), gbs=16, mbs=2)
                try:
                    split.train_microbatch(data.slice(0, 4))
                except RuntimeError as e:
                    r["exception"] = str(e)
                split.abort_train_step_presharded()
                split.abort_train_step()  # idempotent
                split.begin_train_step_presharded(loss_fn, gbs=16, mbs=2)
            else:
                split.begin_train_step(loss_fn, gbs=16, mbs=2)
            REDUCTIONS[0] = 0
            split.train_microbatch(data.slice(0, 4))
            split.train_microbatch(data.slice(4, 8))
            if step == 1:
                m2 = split.finish_train_step_presharded()
                r["is_replica_leader"] = m2["is_replica_leader"]
            else:
                m2 = split.finish_train_step()
            r["reductions_split"].append(REDUCTIONS[0])
            r["param_diff"].append(float((full_params(one_shot) - full_params(split)).abs().max()))
            diffs = metric_diffs(m1["all_mb_metrics"], m2["all_mb_metrics"])
            r["metric_diff"].append(max(diffs.values()))
            r["metric_keys"] = sorted(diffs)
            r["global_loss_diff"].append(float((m1["global_loss"] - m2["global_loss"]).abs().max()))
            r["grad_norm_diff"].append(float((m1["grad_norm"] - m2["grad_norm"]).abs().max()))
        r["fsdp_param_groups"] = len(split._fsdp_param_groups())
        r["open_step_after_finish"] = split._train_step_state is not None
        result[level] = r
print(json.dumps(result), flush=True)
dist.destroy_process_group()
"""


def _spawn(nemo_rl_root: Path, kind: str) -> list[dict[str, Any]] | str:
    """Both ranks' results, or the failure text (each test then fails with it)."""
    try:
        stdouts = run_ranks(_SCRIPT, 2, str(nemo_rl_root), str(REPO_ROOT), kind)
    except AssertionError as failure:
        return str(failure)
    outs = [json.loads(stdout.strip().splitlines()[-1]) for stdout in stdouts]
    for out in outs:
        assert Path(out["file"]).is_relative_to(nemo_rl_root), out["file"]
    return outs


KINDS = {"v1": "DTensorPolicyWorkerImpl", "v2": "DTensorPolicyWorkerV2Impl"}


@pytest.fixture(scope="module", params=sorted(KINDS))
def runs(request: pytest.FixtureRequest, nemo_rl_on_path: Path) -> list[dict[str, Any]] | str:
    """One worker kind's two-rank run (v1, v2), shared by the tests below."""
    kind = request.param
    if kind == "v2" and not automodel_installed():
        pytest.skip(MISSING_REASON)
    outs = _spawn(nemo_rl_on_path, kind)
    if not isinstance(outs, str):
        assert {out["class"] for out in outs} == {KINDS[kind]}, outs
    return outs


def _levels(runs: list[dict[str, Any]] | str) -> list[dict[str, Any]]:
    assert not isinstance(runs, str), runs
    return [out[level] for out in runs for level in ("token", "sequence")]


def test_split_step_matches_train(runs: list[dict[str, Any]] | str) -> None:
    for r in _levels(runs):
        assert max(r["param_diff"]) <= TOL, r
        assert max(r["metric_diff"]) <= TOL, r
        assert max(r["global_loss_diff"]) <= TOL, r
        assert max(r["grad_norm_diff"]) <= TOL, r
        assert "probs_ratio" in r["metric_keys"] and "num_valid_samples" in r["metric_keys"]
        assert not r["open_step_after_finish"]


def test_split_step_reduces_gradients_once(runs: list[dict[str, Any]] | str) -> None:
    for r in _levels(runs):
        groups = r["fsdp_param_groups"]
        assert groups == 3, r  # two decoder layers + the root
        assert r["reductions_split"] == [groups, groups], r
        assert r["reductions_train"] == [4 * groups, 4 * groups], r  # train(): per microbatch


def test_exception_then_abort_then_next_step(runs: list[dict[str, Any]] | str) -> None:
    for r in _levels(runs):
        assert r["exception"] == "loss failed on purpose", r
        # The step after the aborted one still equals train(): nothing leaked.
        assert r["param_diff"][1] <= TOL and r["metric_diff"][1] <= TOL, r


def test_begin_train_step_presharded(runs: list[dict[str, Any]] | str) -> None:
    # Step 2 of every run went through TQWorkerMixin.begin_train_step_presharded and
    # finish_train_step_presharded (abort_train_step_presharded before it).
    for r in _levels(runs):
        assert len(r["param_diff"]) == 2 and r["param_diff"][1] <= TOL, r
        assert r["is_replica_leader"] is True, r  # DP rank of a TP = CP = 1 mesh


GUARD_CASES = [
    (module, cls, entry)
    for module, cls in (
        ("nemo_rl.models.policy.workers.dtensor_policy_worker", "DTensorPolicyWorkerImpl"),
        ("nemo_rl.models.policy.workers.dtensor_policy_worker_v2", "DTensorPolicyWorkerV2Impl"),
    )
    for entry in ("begin_train_step", "train_microbatch", "finish_train_step")
]


@pytest.mark.parametrize(("module_name", "class_name", "entry"), GUARD_CASES)
def test_offloaded_split_step_raises(
    module_name: str, class_name: str, entry: str, nemo_rl_on_path: Path
) -> None:
    """The offload guard is the first thing each split entry point runs."""
    import importlib

    from tests.patches.nemo_rl.heavy_import_stubs import stubbed_imports

    with stubbed_imports():
        module = importlib.import_module(module_name)
    worker = object.__new__(getattr(module, class_name))
    worker._weights_offloaded = True
    args = {"begin_train_step": (None,), "train_microbatch": (None,), "finish_train_step": ()}
    with pytest.raises(RuntimeError) as excinfo:
        getattr(worker, entry)(*args[entry])
    assert f"Call prepare_for_training() before {entry}()" in str(excinfo.value)
