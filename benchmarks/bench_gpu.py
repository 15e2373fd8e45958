"""The worker on one GPU at the gpu-smoke shape, next to megatron-core's own equivalents.

Prints tokens/s of the worker's split train step (begin / train_microbatch x K / finish), its
one-shot `train()`, `get_logprobs` and `generate`, each beside megatron-core's own way of doing
the same work on the SAME model objects (same shape, spec, bf16 `Float16Module`, DDP and
optimizer), as ratios (worker / megatron-core; targets >= 0.9), and the peak GPU memory:

- train step: megatron-core's schedule (`get_forward_backward_func`, K microbatches under its
  own `no_sync`, `finalize_model_grads`) and `optimizer.step()`, loss = mean token NLL;
- logprobs: one forward of the wrapped model over the same tokens, logits only;
- generate: greedy decode through megatron-core's `StaticInferenceContext` (KV cache).

    uv run python benchmarks/bench_gpu.py [--rows 32] [--seq 512] [--mbs 4] [--repeat 3]

Without CUDA it says so and exits 0 without figures. `--cpu-check` runs the same code at a
tiny shape on the CPU (megatron-core through the worker's CPU redirects) to check the script
itself; its numbers are not GPU figures and are labelled so.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "integration"))

from mcore_grpo.config.loader import load_config  # noqa: E402
from mcore_grpo.grpo.algorithm.loss import worker_default_loss  # noqa: E402
from mcore_grpo.grpo.ranks.messages import TaskTokens  # noqa: E402
from mcore_grpo.grpo.ranks.worker_settings import worker_config  # noqa: E402
from mcore_grpo.worker.config import ModelConfig, WorkerConfig  # noqa: E402
from mcore_grpo.worker.cpu import cpu_device  # noqa: E402
from mcore_grpo.worker.forward import token_positions  # noqa: E402
from mcore_grpo.worker.generation import SamplingParams  # noqa: E402
from mcore_grpo.worker.policy_worker import MegatronPolicyWorker  # noqa: E402

TINY = ModelConfig(num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128)


def bench_config(args: argparse.Namespace) -> WorkerConfig:
    """The gpu-smoke preset's worker, with the benchmark's vocab, lengths and DDP overlap."""
    preset = load_config("gpu-smoke")
    vocab = preset.policy.tiny_model.padded_vocab_size or 151936
    base = worker_config(preset, TaskTokens(vocab_size=vocab, pad_id=0, eos_id=1))
    model = base.model if not args.cpu_check else dataclasses.replace(base.model, **_tiny())
    model = dataclasses.replace(
        model,
        vocab_size=model.padded_vocab_size,
        max_sequence_length=max(args.seq, args.prompt + args.new_tokens),
    )
    return dataclasses.replace(
        base,
        device="cpu" if args.cpu_check else "cuda",
        precision="float32" if args.cpu_check else "bfloat16",
        micro_batch_size=args.mbs,
        model=model,
        # megatron-core's own step in DESIGN.md ran with these; the worker gets the same.
        optimizer=dataclasses.replace(base.optimizer, use_distributed_optimizer=True),
        ddp=dataclasses.replace(
            base.ddp,
            overlap_grad_reduce=True,
            overlap_param_gather=True,
            grad_reduce_in_fp32=True,
        ),
    ).validate()


def _tiny() -> dict[str, Any]:
    fields = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size")
    return {f: getattr(TINY, f) for f in fields} | {
        "num_query_groups": 2,
        "padded_vocab_size_override": 256,
    }


def make_batch(rows: int, seq: int, vocab: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Full-length rows of random tokens; every token after the first trained."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, seq), generator=g)
    token_mask = torch.ones(rows, seq, dtype=torch.long)
    token_mask[:, 0] = 0
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones(rows, seq, dtype=torch.long),
        "token_mask": token_mask,
        "sample_mask": torch.ones(rows),
        "advantages": torch.randn(rows, generator=g),
        "prev_logprobs": -12.0 + 0.1 * torch.randn(rows, seq, generator=g),
    }
    return {k: v.to(device) for k, v in batch.items()}


def chunks(batch: dict[str, torch.Tensor], size: int) -> Iterator[dict[str, torch.Tensor]]:
    """Consecutive row slices."""
    rows = batch["input_ids"].shape[0]
    for i in range(0, rows, size):
        yield {k: v[i : i + size] for k, v in batch.items()}


def sync(device: torch.device) -> None:
    """Wait for the device (timings must include the kernels)."""
    if device.type == "cuda":
        torch.cuda.synchronize()


PEAKS: dict[str, float] = {}


def timed(
    fn: Callable[[], Any], device: torch.device, repeat: int, warmup: int = 1, name: str = ""
) -> float:
    """Median seconds of `fn` after `warmup` calls; with `name`, the peak GPU memory of the
    timed calls (after the warm-up, so lazily created optimizer state counts on both sides)
    goes to PEAKS[name] in GiB."""
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(repeat):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    if name and device.type == "cuda":
        PEAKS[name] = torch.cuda.max_memory_allocated() / 2**30
    return statistics.median(times)


# ---- megatron-core's own equivalents, on the worker's model objects ---------------------------
def mcore_train_step(worker: MegatronPolicyWorker, batch: dict[str, torch.Tensor]) -> None:
    """megatron-core's training step: its schedule over K microbatches (its no_sync, its
    finalize_model_grads through the model config hooks) and the optimizer step."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    policy = worker.policy
    mbs = worker.config.micro_batch_size
    parts = list(chunks(batch, mbs))

    def forward_step(data: Iterator[dict[str, torch.Tensor]], model: Any) -> Any:
        mb = next(data)
        # No padding in these batches: megatron-core's own causal attention, no mask.
        logits = model(mb["input_ids"], token_positions(mb["attention_mask"]), None)

        def loss_func(output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
            logp = torch.log_softmax(output[:, :-1].float(), dim=-1)
            nll = -logp.gather(-1, mb["input_ids"][:, 1:, None]).sum()
            count = torch.tensor(mb["input_ids"][:, 1:].numel(), device=output.device)
            return nll, count.to(torch.int), {}

        return logits, loss_func

    policy.ddp.train()
    policy.ddp.zero_grad_buffer()
    policy.optimizer.zero_grad()
    get_forward_backward_func()(
        forward_step_func=forward_step,
        data_iterator=iter(parts),
        model=[policy.ddp],
        num_microbatches=len(parts),
        seq_length=batch["input_ids"].shape[1],
        micro_batch_size=mbs,
        forward_only=False,
    )
    policy.optimizer.step()


@torch.no_grad()
def mcore_forward(worker: MegatronPolicyWorker, batch: dict[str, torch.Tensor]) -> None:
    """megatron-core's forward of the wrapped model over the same tokens (logits only)."""
    worker.policy.ddp.eval()
    worker.policy.ddp(batch["input_ids"], token_positions(batch["attention_mask"]), None)
    worker.policy.ddp.train()


@torch.no_grad()
def mcore_static_decode(worker: MegatronPolicyWorker, prompt: torch.Tensor, new: int) -> None:
    """Greedy decode through megatron-core's StaticInferenceContext (its KV cache)."""
    from megatron.core.inference.contexts import StaticInferenceContext

    model = worker.policy.ddp.module  # Float16Module(GPTModel): no DDP hooks in inference
    model.eval()
    rows, plen = prompt.shape
    ctx = StaticInferenceContext(rows, plen + new)
    positions = torch.arange(plen, device=prompt.device).expand(rows, plen)
    logits = model(prompt, positions, None, inference_context=ctx)
    ctx.sequence_len_offset += plen
    ctx.enable_decode_mode()
    for step in range(new - 1):
        token = logits[:, -1, :].argmax(dim=-1, keepdim=True)
        pos = torch.full((rows, 1), plen + step, device=prompt.device, dtype=torch.long)
        logits = model(token, pos, None, inference_context=ctx)
        ctx.sequence_len_offset += 1
    model.train()


# ---- the worker's own entry points ------------------------------------------------------------
def worker_split_step(worker: MegatronPolicyWorker, batch: dict[str, torch.Tensor]) -> None:
    """begin / train_microbatch per microbatch / finish."""
    worker.begin_train_step()
    for part in chunks(batch, worker.config.micro_batch_size):
        worker.train_microbatch(part)
    worker.finish_train_step()


def init_single_rank(device: str) -> None:
    """One-rank torch.distributed (NCCL on CUDA, gloo on the CPU check)."""
    import torch.distributed as dist
    from mcore_grpo.worker.parallel import backend_for

    if dist.is_initialized():
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as sock:  # a free port for the one-rank TCP store
            sock.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    if device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(backend_for(device), rank=0, world_size=1)


def row(name: str, tokens: int, ours: float, theirs: float, what: str) -> str:
    """One table line: tokens/s of both and the ratio."""
    a, b = tokens / ours, tokens / theirs
    return f"| {name} | {a:,.0f} | {what} | {b:,.0f} | {a / b:.2f}x |"


def run(args: argparse.Namespace) -> list[str]:
    """Measure everything; returns the table lines."""
    config = bench_config(args)
    init_single_rank(config.device)
    if config.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    worker = MegatronPolicyWorker(config, loss_sum_fn=worker_default_loss(config.loss))
    device = worker.device
    m = config.model
    batch = make_batch(args.rows, args.seq, m.vocab_size, device)
    tokens = args.rows * args.seq
    prompt = make_batch(args.rows, args.prompt, m.vocab_size, device)["input_ids"]
    gen_tokens = args.rows * args.new_tokens
    # Greedy-equivalent sampling for the worker: near-zero temperature is not allowed to
    # differ from the config's, so sample at the config's temperature (cost is the same).
    params = SamplingParams(
        temperature=config.temperature, max_new_tokens=args.new_tokens, pad_token_id=0
    )
    gen = torch.Generator(device=device).manual_seed(0)
    r = args.repeat

    worker.prepare_for_training()
    split = timed(lambda: worker_split_step(worker, batch), device, r, name="split")
    one_shot = timed(lambda: worker.train(batch), device, r, name="one_shot")
    with cpu_device(config.device):
        own_step = timed(lambda: mcore_train_step(worker, batch), device, r, name="own_step")
    worker.prepare_for_lp_inference()
    logprobs = timed(lambda: worker.get_logprobs(batch), device, r, name="logprobs")
    with cpu_device(config.device):
        own_forward = timed(lambda: mcore_forward(worker, batch), device, r, name="own_forward")
    worker.prepare_for_generation()
    generate = timed(
        lambda: worker.generate(prompt, torch.ones_like(prompt), params, gen),
        device,
        1,
        name="generate",
    )
    with cpu_device(config.device):
        own_decode = timed(
            lambda: mcore_static_decode(worker, prompt, args.new_tokens),
            device,
            1,
            name="own_decode",
        )
    worker.finish_generation()

    params_b = sum(p.numel() for p in worker.policy.gpt.parameters()) / 1e9
    peak = (
        f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"
        if device.type == "cuda"
        else "n/a (CPU)"
    )
    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU (check only)"
    return [
        f"device: {name}; layer spec: {worker.policy.layer_spec}; {config.precision}; "
        f"{m.num_layers} layers, hidden {m.hidden_size}, {params_b:.2f} B parameters",
        f"train: {args.rows} x {args.seq} tokens in microbatches of {args.mbs}; generate: "
        f"{args.rows} prompts x {args.prompt} tokens, {args.new_tokens} new",
        "",
        "| worker | tokens/s | megatron-core's own | tokens/s | ratio |",
        "|---|---|---|---|---|",
        row("split train step", tokens, split, own_step, "schedule + finalize + step"),
        row("one-shot train()", tokens, one_shot, own_step, "schedule + finalize + step"),
        row("get_logprobs", tokens, logprobs, own_forward, "forward (logits)"),
        row("generate", gen_tokens, generate, own_decode, "StaticInferenceContext decode"),
        "",
        f"peak GPU memory (torch.cuda.max_memory_allocated): {peak}",
        *peak_lines(),
    ]


def peak_lines() -> list[str]:
    """Peak GPU memory of each worker entry point beside megatron-core's own (target: within
    10 %); empty without CUDA."""
    pairs = (
        ("split train step", "split", "own_step"),
        ("one-shot train()", "one_shot", "own_step"),
        ("get_logprobs", "logprobs", "own_forward"),
        ("generate", "generate", "own_decode"),
    )
    if not PEAKS:
        return []
    lines = ["", "| peak GiB | worker | megatron-core's own | ratio |", "|---|---|---|---|"]
    for label, ours, theirs in pairs:
        a, b = PEAKS[ours], PEAKS[theirs]
        lines.append(f"| {label} | {a:.1f} | {b:.1f} | {a / b:.2f}x |")
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--mbs", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--cpu-check",
        action="store_true",
        help="run the same code at a tiny fp32 shape on the CPU (checks the script; no figures)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point; exits 0 without figures where there is no CUDA."""
    args = parse_args(argv)
    if not args.cpu_check and not torch.cuda.is_available():
        print("bench_gpu: needs CUDA (torch sees no GPU here); no figures.")
        return 0
    if args.cpu_check:
        print("bench_gpu --cpu-check: tiny fp32 model on the CPU; NOT GPU figures.")
    for line in run(args):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
