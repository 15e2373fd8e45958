"""The worker against the obvious alternative on one machine: plain `transformers` + PyTorch,
on the same pretrained model (SmolLM2-135M-Instruct), batch and sequence lengths.

Each side runs in a fresh process of its own, so its peak RSS (`ru_maxrss`) is its own:
- train step (forward + backward + optimizer step) tokens/s: the worker's `train()` (the
  GRPO clipped loss, distributed optimizer, megatron-core Adam) vs `transformers` eager with a
  cross-entropy loss over the same tokens and `torch.optim.AdamW` (the loss term costs nothing
  next to the model);
- sampling tokens/s with a KV cache: the worker's `generate` (megatron-core's
  StaticInferenceContext) vs `transformers`' `generate`, same batch, prompt length and number of
  new tokens, temperature 1, top-p 1, no stop token (every row generates exactly T tokens).

Printed, never asserted, with the load average before and after (the machine may be shared).

Run: .venv/bin/python benchmarks/bench_vs_transformers.py [--batch 16] [--seq 256]
     [--gen-batch 16] [--prompt 32] [--new 64] [--steps 3] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _model_dir() -> str:
    from mcore_grpo.grpo.policy_model.pretrained import SMOLLM2, resolve_pretrained

    return resolve_pretrained(SMOLLM2)


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _figures(args: argparse.Namespace, train: list[float], gen: list[float]) -> dict[str, float]:
    """One side's figures: the fastest timed train step (the first is a warm-up) and the
    fastest of the generate calls, as tokens/s, and this process's peak RSS."""
    train_s = min(train[1:])
    return {
        "train_step_s": train_s,
        "train_tokens_per_s": args.batch * args.seq / train_s,
        "generate_s": min(gen),
        "generate_tokens_per_s": args.gen_batch * args.new / min(gen),
        "peak_rss_gib": _peak_rss_gib(),
    }


def hf_side(args: argparse.Namespace) -> dict[str, float]:
    """`transformers` eager: AdamW train steps, then `generate` with its KV cache."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(_model_dir(), dtype=torch.float32)
    vocab = model.config.vocab_size
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    ids = torch.randint(0, vocab, (args.batch, args.seq))
    times = []
    model.train()
    for _ in range(args.steps + 1):
        start = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    model.eval()
    prompt = torch.randint(0, vocab, (args.gen_batch, args.prompt))
    gen = []
    for _ in range(2):
        start = time.perf_counter()
        hf_sample(model, prompt, args.new)
        gen.append(time.perf_counter() - start)
    return _figures(args, times, gen)


def hf_sample(model: Any, prompt: Any, new: int) -> Any:
    """`transformers.generate` as the worker samples: temperature 1, top-p 1, no top-k, no stop
    token (every row gets exactly `new` tokens, checked)."""
    import torch

    with torch.no_grad():
        out = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            pad_token_id=0,
        )
    assert out.shape[1] == prompt.shape[1] + new, out.shape
    return out


def worker_side(args: argparse.Namespace) -> dict[str, float]:
    """The worker (one rank, gloo): `train()` steps, then `generate` (static KV cache)."""
    import torch
    import torch.distributed as dist
    from mcore_grpo.config.policy import OptimizerSection
    from mcore_grpo.grpo.algorithm.loss import worker_default_loss
    from mcore_grpo.worker.config import ModelConfig, WorkerConfig
    from mcore_grpo.worker.generation import SamplingParams
    from mcore_grpo.worker.policy_worker import MegatronPolicyWorker

    from tests.support.ports import free_port

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.manual_seed(0)
    model_dir = _model_dir()
    vocab = json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"]
    config = WorkerConfig(
        device="cpu",
        micro_batch_size=args.batch,
        model=ModelConfig(
            hf_checkpoint=model_dir, vocab_size=vocab, max_sequence_length=args.seq + args.new
        ),
        optimizer=OptimizerSection(lr=1e-6),
    )
    worker = MegatronPolicyWorker(config, loss_sum_fn=worker_default_loss(config.loss))
    ids = torch.randint(0, vocab, (args.batch, args.seq))
    ones = torch.ones(args.batch, args.seq)
    batch = {
        "input_ids": ids,
        "attention_mask": ones.long(),
        "token_mask": ones.long(),
        "sample_mask": torch.ones(args.batch),
        "advantages": torch.randn(args.batch),
        "prev_logprobs": torch.zeros(args.batch, args.seq),
        "generation_logprobs": torch.zeros(args.batch, args.seq),
        "reference_policy_logprobs": torch.zeros(args.batch, args.seq),
    }
    worker.prepare_for_training()
    times = []
    for _ in range(args.steps + 1):
        start = time.perf_counter()
        worker.train(batch)
        times.append(time.perf_counter() - start)
    worker.prepare_for_generation()
    prompt = torch.randint(0, vocab, (args.gen_batch, args.prompt))
    params = SamplingParams(max_new_tokens=args.new, pad_token_id=0)
    gen = []
    for seed in range(2):
        start = time.perf_counter()
        out = worker.generate(
            prompt, torch.ones_like(prompt), params, torch.Generator().manual_seed(seed)
        )
        gen.append(time.perf_counter() - start)
        assert int(out.generation_lengths.min()) == args.new
    worker.finish_generation()
    return _figures(args, times, gen)


def _run_side(side: str, argv: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--side", side, *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{side} side failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8, help="train rows")
    parser.add_argument("--seq", type=int, default=256, help="train tokens per row")
    parser.add_argument("--gen-batch", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3, help="timed train steps (after one warm)")
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch threads of each side"
    )
    parser.add_argument("--side", choices=("hf", "worker"), help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.side:
        import torch

        torch.set_num_threads(args.threads)
        result = hf_side(args) if args.side == "hf" else worker_side(args)
        print(json.dumps(result))
        return
    argv = [a for a in sys.argv[1:] if a not in rest]
    load_before = os.getloadavg()[0]
    hf = _run_side("hf", argv)
    worker = _run_side("worker", argv)
    load_after = os.getloadavg()[0]
    print(
        f"SmolLM2-135M-Instruct, fp32, {args.threads} torch threads on {os.cpu_count()} CPUs; "
        f"train {args.batch} x "
        f"{args.seq} tokens, sampling batch {args.gen_batch}, prompt {args.prompt}, "
        f"{args.new} new tokens; load average {load_before:.2f} before, {load_after:.2f} after"
    )
    print(f"{'':28}{'worker':>12}{'transformers':>14}{'ratio':>8}")
    for key, label in (
        ("train_tokens_per_s", "train step tokens/s"),
        ("generate_tokens_per_s", "sampling tokens/s"),
        ("peak_rss_gib", "peak RSS GiB"),
    ):
        ratio = worker[key] / hf[key]
        print(f"{label:28}{worker[key]:>12.1f}{hf[key]:>14.1f}{ratio:>7.2f}x")
    print(
        f"train step s: worker {worker['train_step_s']:.2f}, transformers {hf['train_step_s']:.2f}"
    )


if __name__ == "__main__":
    main()
