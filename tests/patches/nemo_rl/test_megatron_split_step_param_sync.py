"""Megatron split train step with the distributed optimizer and `overlap_param_gather=True`.

The question (issue 14): `MegatronPolicyWorkerImpl.__init__` disables DDP's forward
pre-hooks and nulls `param_sync_func` when the distributed optimizer runs with
`overlap_param_gather` (`_disable_forward_pre_hook_until_next_train_step`), and only the
one-call `train()` re-enables them after its first successful step. megatron-core's
`DistributedOptimizer.step_with_ready_grads` skips the parameter all-gather when
`overlap_param_gather` is on and leaves it to those hooks. Does a split step
(`begin_train_step` / `train_microbatch` / `finish_train_step`) therefore run its next
forward on parameters whose other-rank shards are stale?

Two gloo ranks (data-parallel size 2, spawned processes, CPU), real megatron-core
`DistributedDataParallel` + `DistributedOptimizer` (`get_megatron_optimizer`) with
`overlap_param_gather=True`, and NeMo-RL's own split-step methods from 3rdparty/NeMo-RL bound
to a worker built with `object.__new__` plus the state they read; the state `__init__`
leaves behind comes from the real `_disable_forward_pre_hook_until_next_train_step()`
under the same condition `__init__` uses. Several split steps, no reference pass, no
`train()`, then a probe step (begin, one microbatch, abort). Every forward records the weights
each layer actually multiplies with: each step's forward must run on weights that changed
since the previous step, on the same full weights on both ranks, and the probe's forward on
the optimizer's updated values (each rank's own param-buffer shard, all-gathered by force).

Unpatched it trips: the hooks stay off, `optimizer.step()` updates only each rank's own shard,
and the forward weights differ across ranks by 0.05, 0.10, 0.15, 0.20 (Adam, lr 0.05: one
missing update per step) before steps 2-4 and the probe.

Doubles, each because the real piece is GPT-specific or not importable here:
- `get_microbatch_iterator` / `LossPostProcessor` / `megatron_forward_backward` (NeMo-RL's
  GPT batch packing and logprob loss): replaced by a split into microbatches and megatron-
  core's real `forward_backward_no_pipelining` over a 3-layer MLP with a squared-output loss.
  The DDP wrapper, its hooks, `no_sync`, `finalize_model_grads` and the optimizer are real.
- Megatron-Bridge's `get_pg_collection` / `logical_and_across_model_parallel_group` /
  `reduce_max_stat_across_model_parallel_group` (Bridge needs Transformer Engine): with
  model-parallel size 1 these reduce over one rank, i.e. return their input.
- `broadcast_loss_metrics_from_last_stage`: with pipeline size 1 the only stage is the last
  one, where the real function returns its argument.
- The LR scheduler (Bridge's `OptimizerParamScheduler`): constant lr/wd, `step` counted.
CUDA calls go through `mcore_grpo.worker.cpu.cpu_device` (the project's megatron-core CPU redirects).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.python_process import run_ranks

pytestmark = [
    pytest.mark.nemo_rl,
    pytest.mark.cpu_only(
        reason="2 gloo ranks on CPU under the mcore_grpo.worker.cpu redirects, which refuse where CUDA exists"
    ),
]

REPO_ROOT = Path(__file__).resolve().parents[3]
STEPS = 4

_SCRIPT = r"""
import importlib, json, os, sys
from types import SimpleNamespace

port, rank, nemo_rl_root, repo_root, steps = sys.argv[1:6]
rank, steps = int(rank), int(steps)
# This project's `tests` package first: NeMo-RL's checkout has a `tests` package of its own.
sys.path.insert(0, repo_root)
from tests.patches.nemo_rl.heavy_import_stubs import stubbed_imports
sys.path.insert(0, nemo_rl_root)
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)

import torch
import torch.distributed as dist
from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
from megatron.core import parallel_state
from megatron.core.enums import ModelType
from megatron.core.distributed import (
    DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads,
)
from megatron.core.optimizer import ChainedOptimizer, OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel.schedules import forward_backward_no_pipelining
from megatron.core.rerun_state_machine import get_rerun_state_machine
from megatron.core.transformer import TransformerConfig
from megatron.core.utils import get_model_config

with stubbed_imports():
    wmod = importlib.import_module("nemo_rl.models.policy.workers.megatron_policy_worker")
from nemo_rl.algorithms.loss.interfaces import LossType
from nemo_rl.distributed.batched_data_dict import BatchedDataDict

dist.init_process_group("gloo", rank=rank, world_size=2)
parallel_state.initialize_model_parallel(tensor_model_parallel_size=1)
torch.manual_seed(0)  # identical initial weights and data on both ranks

H = 8
SEEN = []  # (layer index, weights the layer multiplied with), in forward order


class RecordingLinear(torch.nn.Linear):
    def __init__(self, index):
        super().__init__(H, H, bias=False)
        self.index = index

    def forward(self, x):
        # Runs after this module's forward pre-hooks (DDP's param all-gather wait).
        SEEN.append((self.index, self.weight.detach().clone()))
        return super().forward(x)


class Mlp(torch.nn.Module):
    model_type = ModelType.encoder_or_decoder  # read by megatron-core's schedules

    def set_input_tensor(self, tensor):  # pipeline stage input; unused at PP=1
        pass

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(RecordingLinear(i) for i in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


# Bare worker: NeMo-RL's real split-step methods, the state they read.
class Scheduler:
    def __init__(self):
        self.steps = 0
    def get_lr(self, group):
        return group["lr"]
    def get_wd(self):
        return 0.0
    def step(self, increment):
        self.steps += 1


def get_microbatch_iterator(data, cfg, mbs, straggler_timer=None):
    n = data.size // mbs
    batches = [data.slice(i * mbs, (i + 1) * mbs) for i in range(n)]
    seq = data["input_ids"].shape[1]
    return iter(batches), n, mbs, seq, seq


def loss_post_processor(**kwargs):
    return kwargs["loss_fn"]


def megatron_forward_backward(*, model, data_iterator, num_microbatches, seq_length, mbs,
                              forward_only=False, **unused):
    def forward_step(it, m):
        batch = next(it)
        out = m(batch["x"])
        mask = batch["token_mask"][:, 1:] * batch["sample_mask"].unsqueeze(-1)

        def loss_func(output):
            loss = (output[:, 1:].pow(2).mean(-1) * mask).sum()
            return loss, {"loss": loss.detach().clone()}

        return out, loss_func

    return forward_backward_no_pipelining(
        forward_step_func=forward_step, data_iterator=data_iterator, model=model,
        num_microbatches=num_microbatches, seq_length=seq_length, micro_batch_size=mbs,
        forward_only=forward_only,
    )


class LossFn:
    loss_type = LossType.TOKEN_LEVEL
    metric_normalizations = {}


with cpu_device("cpu"):
    model_parallel_seed(1234, "cpu")
    torch.manual_seed(0)
    tcfg = TransformerConfig(num_layers=1, hidden_size=H, num_attention_heads=1)
    ddp_cfg = DistributedDataParallelConfig(
        use_distributed_optimizer=True, overlap_grad_reduce=False,
        overlap_param_gather=True, bucket_size=H * H,  # one layer per bucket
    )
    ddp = DistributedDataParallel(tcfg, ddp_cfg, Mlp())
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=0.05, weight_decay=0.0,
                        clip_grad=0.0, use_distributed_optimizer=True, bf16=False, fp16=False,
                        params_dtype=torch.float32),
        [ddp],
    )
    # What Megatron-Bridge's _update_model_config_funcs binds (setup.py finalize step).
    tcfg.no_sync_func = ddp.no_sync
    tcfg.grad_sync_func = None
    tcfg.param_sync_func = ddp.start_param_sync
    tcfg.finalize_model_grads_func = finalize_model_grads

    # Module-level names of the worker module that were stubbed at import: put the real
    # megatron-core objects back, and the doubles listed in the test's docstring.
    real = dict(
        parallel_state=parallel_state, DistributedDataParallel=DistributedDataParallel,
        ChainedOptimizer=ChainedOptimizer, get_rerun_state_machine=get_rerun_state_machine,
        get_model_config=get_model_config,
        get_pg_collection=lambda model: SimpleNamespace(mp=None),
        logical_and_across_model_parallel_group=lambda value, mp_group=None: value,
        reduce_max_stat_across_model_parallel_group=lambda value, mp_group=None: value,
        broadcast_loss_metrics_from_last_stage=lambda metrics=None: metrics,
        get_microbatch_iterator=get_microbatch_iterator,
        LossPostProcessor=loss_post_processor,
        megatron_forward_backward=megatron_forward_backward,
    )
    for name, value in real.items():
        assert hasattr(wmod, name), name
        setattr(wmod, name, value)
    torch.cuda.get_device_name = lambda *a: "cpu"

    w = object.__new__(wmod.MegatronPolicyWorkerImpl)
    w.model, w.optimizer, w.scheduler = ddp, optimizer, Scheduler()
    w.rank, w.dtype, w._weights_offloaded = rank, torch.float32, False
    w.cfg = {
        "train_global_batch_size": 8, "train_micro_batch_size": 2,
        "megatron_cfg": {
            "empty_unused_memory_level": 0, "moe_per_layer_logging": False,
            "optimizer": {"use_distributed_optimizer": True},
            "distributed_data_parallel_config": {
                "overlap_grad_reduce": False, "overlap_param_gather": True,
            },
        },
    }
    w.megatron_cfg = SimpleNamespace(
        optimizer=SimpleNamespace(reuse_grad_buf_for_mxfp8_param_ag=False),
        ddp=SimpleNamespace(overlap_param_gather=True),
    )
    w.mcore_state = SimpleNamespace(straggler_timer=None)
    w._router_replay_enabled, w.draft_model, w.sampling_params = False, None, None
    w.defer_fp32_logits = False
    # megatron/setup.py finalize_megatron_setup: dist-opt and overlap_param_gather.
    w.should_disable_forward_pre_hook = (
        w.cfg["megatron_cfg"]["optimizer"]["use_distributed_optimizer"]
        and w.cfg["megatron_cfg"]["distributed_data_parallel_config"]["overlap_param_gather"]
    )
    # The three statements at the end of MegatronPolicyWorkerImpl.__init__ (step 6).
    w._first_train_step_forward_pre_hook_disabled = False
    w._first_train_step_param_sync_func = None
    if w.should_disable_forward_pre_hook and w._forward_pre_hook_enabled():
        w._disable_forward_pre_hook_until_next_train_step()

    def local_batch(step):
        g = torch.Generator().manual_seed(100 * step + rank)
        b, s = 4, 5
        return BatchedDataDict({
            "x": torch.randn(b, s, H, generator=g),
            "input_ids": torch.zeros(b, s, dtype=torch.long),
            "token_mask": torch.ones(b, s),
            "sample_mask": torch.ones(b),
        })

    def first_forward_weights():
        # The weights each layer multiplied with in its first forward since SEEN.clear().
        first = {}
        for index, weight in SEEN:
            first.setdefault(index, weight)
        return torch.cat([first[i].flatten() for i in range(3)])

    def cross_rank_max_diff(flat):
        gathered = [torch.empty_like(flat) for _ in range(2)]
        dist.all_gather(gathered, flat)
        return float((gathered[0] - gathered[1]).abs().max())

    seen, cross = [], []
    for step in range(steps + 1):
        SEEN.clear()
        w.begin_train_step(LossFn(), gbs=8, mbs=2)
        w.train_microbatch(local_batch(step))
        if step < steps:
            w.finish_train_step()
        else:
            w.abort_train_step()  # the probe: one more forward, no update
        seen.append(first_forward_weights())
        cross.append(cross_rank_max_diff(seen[-1]))

    # The optimizer's updated values: each rank's own shard of the param buffer, all-gathered
    # once by force (what start_param_sync does when it is not deferred to the hooks).
    ddp.start_param_sync(force_sync=True)
    full = torch.cat([layer.weight.detach().flatten().clone() for layer in ddp.module.layers])
    result = {
        "rank": rank,
        "file": wmod.__file__,
        "cross_rank_max_diff": cross,
        "changed": [float((seen[i] - seen[i - 1]).abs().max()) for i in range(1, steps + 1)],
        "probe_vs_optimizer_max_diff": float((seen[-1] - full).abs().max()),
        "scheduler_steps": w.scheduler.steps,
    }
print(json.dumps(result), flush=True)
parallel_state.destroy_model_parallel()
dist.destroy_process_group()
"""


def test_split_steps_see_updated_params_with_overlap_param_gather(nemo_rl_on_path: Path) -> None:
    stdouts = run_ranks(_SCRIPT, 2, str(nemo_rl_on_path), str(REPO_ROOT), str(STEPS), timeout=600)
    outs = [json.loads(stdout.strip().splitlines()[-1]) for stdout in stdouts]
    for out in outs:
        assert Path(out["file"]).is_relative_to(nemo_rl_on_path), out["file"]
        assert out["scheduler_steps"] == STEPS
        # Every forward after a step ran on updated weights ...
        assert min(out["changed"]) > 0, out
        # ... the same full weights on both ranks ...
        assert max(out["cross_rank_max_diff"]) == 0.0, (
            f"rank {out['rank']}: split-step forwards ran on weights that differ across "
            f"ranks, max abs diff per step {out['cross_rank_max_diff']}"
        )
        # ... equal to the optimizer's updated values, all-gathered.
        assert out["probe_vs_optimizer_max_diff"] == 0.0, out
