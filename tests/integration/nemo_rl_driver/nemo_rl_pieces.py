"""The adapter pieces against NeMo-RL's real code; run in a subprocess by test_nemo_rl_pieces.py.

``python tests/integration/nemo_rl_driver/nemo_rl_pieces.py OUT.json``. A subprocess because
importing NeMo-RL has process-wide side effects (logging.basicConfig, os.environ) that other
tests in the pytest process must not see. Prints nothing the test reads; writes OUT.json.
"""

from __future__ import annotations

import inspect
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch


def loss_adapter_vs_direct() -> dict[str, Any]:
    """NeMo-RL's ClippedPGLossFn called once with global counts vs the adapter's two
    microbatch sums divided by the global count (the worker's split step)."""
    from mcore_grpo.nemo_rl_driver.loss import NemoRLLossSum
    from nemo_rl.algorithms.loss.loss_functions import ClippedPGLossConfig, ClippedPGLossFn
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    torch.manual_seed(0)
    b, s = 6, 5
    token_mask = (torch.rand(b, s) > 0.3).float()
    token_mask[:, 0] = 0
    sample_mask = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    data = {
        "token_mask": token_mask,
        "sample_mask": sample_mask,
        "advantages": torch.randn(b, s),
        "prev_logprobs": -2 * torch.rand(b, s),
        "generation_logprobs": -2 * torch.rand(b, s),
        "reference_policy_logprobs": -2 * torch.rand(b, s),
    }
    curr = -2 * torch.rand(b, s - 1, dtype=torch.float32)
    fn = ClippedPGLossFn(ClippedPGLossConfig(reference_policy_kl_penalty=0.01))
    toks = float((token_mask[:, 1:] * sample_mask[:, None]).sum())
    seqs = float(sample_mask.sum())

    direct_lp = curr.clone().requires_grad_(True)
    direct_loss, direct_metrics = fn(
        direct_lp, BatchedDataDict(data), torch.tensor(seqs), torch.tensor(toks)
    )
    direct_loss.backward()

    adapter = NemoRLLossSum(fn, wrap=BatchedDataDict)
    split_lp = curr.clone().requires_grad_(True)
    total = torch.stack(
        [
            adapter(split_lp[rows], {k: v[rows] for k, v in data.items()})
            for rows in (slice(0, 3), slice(3, 6))
        ]
    ).sum()
    (total / toks).backward()
    rows = adapter.take(toks, seqs, 1)
    summed = {
        k: sum(r[k] for r in rows)
        for k in ("loss", "probs_ratio", "kl_penalty", "token_mult_prob_error", "num_valid_samples")
    }
    assert direct_lp.grad is not None and split_lp.grad is not None
    return {
        "loss_diff": abs(float(total) / toks - float(direct_loss)),
        "grad_diff": float((direct_lp.grad - split_lp.grad).abs().max()),
        "metric_diff": {k: abs(v - float(direct_metrics[k])) for k, v in summed.items()},
        "kl_nonzero": float(direct_metrics["kl_penalty"]) > 0,
    }


def dataloader_and_environment() -> dict[str, Any]:
    """The first batch of NeMo-RL's dataloader holds our loop's step-1 prompts; the
    environment scores hand-written responses."""
    from mcore_grpo.grpo.tasks.task import build_task
    from mcore_grpo.nemo_rl_driver.data import build_dataloader
    from mcore_grpo.nemo_rl_driver.environment import TaskEnvironment
    from mcore_grpo.nemo_rl_driver.tokenizer import task_tokenizer

    task = build_task("digit-add")
    tokenizer = task_tokenizer()
    loader = build_dataloader(task, tokenizer, num_prompts=4, seed=42, steps=2, max_seq_length=16)
    batches = list(loader)
    first = [m[0]["token_ids"].tolist() for m in batches[0]["message_log"]]
    ours = [list(p.prompt_ids) for p in task.sample_problems(4, 42, 1)]
    problem = task.problem(7, 1)  # answer 8
    meta = {"prompt_text": problem.text, "prompt_ids": list(problem.prompt_ids), "answer": 8}
    responses = [[10 + 1, 2], [11, 0], [3], [], [11, 2, 5]]  # ids: digit d is d + 3
    logs = [
        [
            {"role": "user", "content": problem.text},
            {"role": "assistant", "content": tokenizer.decode(r)},
        ]
        for r in responses
    ]
    env = TaskEnvironment("digit-add")
    out = env.step(logs, [meta] * len(logs))
    return {
        "num_batches": len(batches),
        "first_batch_prompts_equal": first == ours,
        "decoded": [tokenizer.decode(r) for r in responses],
        "rewards": [float(r) for r in out.rewards],
        "terminated": out.terminateds.tolist(),
    }


def config_and_interfaces() -> dict[str, Any]:
    """The MasterConfig NeMo-RL validates; the adapter classes are concrete."""
    from mcore_grpo.config.loader import load_config
    from mcore_grpo.nemo_rl_driver.config import master_config
    from mcore_grpo.nemo_rl_driver.generation import NemoRLGeneration
    from mcore_grpo.nemo_rl_driver.policy import UNSUPPORTED, NemoRLPolicy
    from mcore_grpo.nemo_rl_driver.tokenizer import task_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        master = master_config(load_config(), 2, Path(tmp), task_tokenizer())
        limited = load_config(overrides=["checkpointing.checkpoint_must_save_by=00:01:02:03"])
        limit = master_config(limited, 2, Path(tmp), task_tokenizer()).checkpointing
        stopping = load_config(
            overrides=[
                "grpo.reward_shaping.enabled=true",
                "grpo.reward_shaping.stop_properly_penalty_coef=0.25",
                "grpo.overlong_filtering=true",
                "policy.megatron_cfg.scheduler.lr_warmup_iters=13",
                "policy.megatron_cfg.scheduler.lr_warmup_init=5e-7",
                "policy.megatron_cfg.optimizer.min_lr=5e-7",
                "grpo.max_num_steps=20",
            ]
        )
        stopping_master = master_config(stopping, 2, Path(tmp), task_tokenizer())
        shaped = stopping_master.grpo
        scheduled = stopping_master.policy["megatron_cfg"]
    gen = master.policy["generation"]
    policy = object.__new__(NemoRLPolicy)
    nothing: Any = None  # each call must refuse before it reads its data
    calls = {
        "get_topk_logits": lambda: policy.get_topk_logits(nothing, 1),
        "calibrate_qkv_fp8_scales": lambda: policy.calibrate_qkv_fp8_scales(nothing),
        "init_collective": lambda: policy.init_collective("127.0.0.1", 0, 2, train_world_size=1),
        "stream_weights_via_ipc_zmq": lambda: policy.stream_weights_via_ipc_zmq(0),
        "broadcast_weights_for_collective": lambda: policy.broadcast_weights_for_collective(),
        "stream_weights_via_http": lambda: policy.stream_weights_via_http([], 0),
        "train(eval_mode=True)": lambda: policy.train(nothing, None, eval_mode=True),
    }
    raised = []
    for name, call in calls.items():
        try:
            call()
        except NotImplementedError:
            raised.append(name)
    return {
        "backend": gen["backend"],
        "colocated": gen["colocated"]["enabled"],
        "stop_token_ids": gen["stop_token_ids"],
        "pad_token_id": gen["_pad_token_id"],
        "gbs": master.policy["train_global_batch_size"],
        "token_level_loss": master.loss_fn.token_level_loss,
        "kl_penalty": master.loss_fn.reference_policy_kl_penalty,
        "policy_abstract": inspect.isabstract(NemoRLPolicy),
        "generation_abstract": inspect.isabstract(NemoRLGeneration),
        "unsupported_raised": sorted(raised),
        "unsupported_listed": sorted(UNSUPPORTED),
        "checkpoint_must_save_by": limit["checkpoint_must_save_by"],
        "default_must_save_by": master.checkpointing.get("checkpoint_must_save_by"),
        "reward_shaping": dict(shaped.reward_shaping),
        "overlong_filtering": shaped.overlong_filtering,
        "default_reward_shaping": dict(master.grpo.reward_shaping),
        "scheduler": dict(scheduled["scheduler"]),
        "min_lr": scheduled["optimizer"]["min_lr"],
    }


def main(out_path: str) -> None:
    from mcore_grpo.grpo.nemo_rl.source import check_importable

    check_importable()
    result = {
        "loss": loss_adapter_vs_direct(),
        "data": dataloader_and_environment(),
        "config": config_and_interfaces(),
    }
    Path(out_path).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
