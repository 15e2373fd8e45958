"""Generation throughput: the KV-cache sampler (megatron-core's StaticInferenceContext) vs the
recompute sampler (whole prefix per token), at T new tokens, on the worker's own model code.

Model: GPTModel (megatron-core local spec, the worker's `build_gpt`), 4 layers, hidden 256,
4 heads, ffn 1024, vocab 4096, fp32; batch 8, 16-token prompts, temperature 1, no stop token
(every row generates exactly T tokens). tokens/s = batch * T / wall time of one `generate`.

Recompute at large T is O(T^2): with `--recompute-max-t` (default 256) the recompute figure
above it is NOT measured end to end but ESTIMATED, and printed as such: one recompute step's
wall time is measured at 9 prefix lengths spanning the run and summed over all T steps by
linear interpolation. The same estimate is printed next to the measured figure at the
measured T, as a check of the estimator.

On CUDA it also times a bare megatron-core static-context greedy decode of the same model
(StaticInferenceContext, no masks, argmax) as the ceiling; on CPU that part is skipped and
says so.

Run: .venv/bin/python benchmarks/bench_generation.py [--lengths 64 256 1024]
     [--recompute-max-t 256] [--repeats 1] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BATCH, PROMPT, VOCAB = 8, 16, 4096


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn: Callable[[], Any], device: torch.device, repeats: int) -> float:
    """Median wall seconds of `fn` over `repeats` runs (after the caller's warm-up)."""
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def build(max_t: int) -> tuple[Any, torch.nn.Module, str]:
    """The benchmark model on CUDA when present, else CPU (with the worker's CPU redirects)."""
    import torch.distributed as dist
    from mcore_grpo.worker.config import ModelConfig, WorkerConfig
    from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
    from mcore_grpo.worker.model import build_gpt
    from mcore_grpo.worker.parallel import init_model_parallel

    from tests.support.ports import free_port

    device = "cuda" if torch.cuda.is_available() else "cpu"
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1"
    )
    dist.init_process_group("gloo", rank=0, world_size=1)
    config = WorkerConfig(
        device=device,
        model=ModelConfig(
            num_layers=4,
            hidden_size=256,
            num_attention_heads=4,
            ffn_hidden_size=1024,
            vocab_size=VOCAB,
            max_sequence_length=PROMPT + max_t,
        ),
    )
    init_model_parallel(config)
    with cpu_device(device), torch.no_grad():
        model_parallel_seed(config.seed, device)
        _, model = build_gpt(config)
    model.eval()
    return config, model, device


def bare_mcore_decode(model: torch.nn.Module, ids: torch.Tensor, steps: int) -> torch.Tensor:
    """megatron-core's own static-context greedy decode: no padding, no masks, argmax."""
    from megatron.core.inference.contexts import StaticInferenceContext
    from megatron.core.inference.utils import InferenceMode

    batch, plen = ids.shape
    context = StaticInferenceContext(batch, plen + steps)
    positions = torch.arange(plen, device=ids.device)[None, :].expand(batch, -1)
    out = [ids]
    with torch.no_grad(), InferenceMode.active():
        logits = model(ids, positions, None, inference_context=context, runtime_gather_output=True)
        context.increment_sequence_len_offset(plen)
        for step in range(steps):
            token = logits[:, -1, :].argmax(dim=-1, keepdim=True)
            out.append(token)
            if step == steps - 1:
                break
            pos = torch.full((batch, 1), plen + step, device=ids.device, dtype=torch.long)
            logits = model(token, pos, None, inference_context=context, runtime_gather_output=True)
            context.increment_sequence_len_offset(1)
    return torch.cat(out, dim=1)


def recompute_estimate(
    model: torch.nn.Module, ids: torch.Tensor, steps: int, device: torch.device
) -> float:
    """Seconds for `steps` recompute steps, from 9 measured steps (see module docstring)."""
    from mcore_grpo.worker.forward import policy_logits
    from mcore_grpo.worker.sampling import SamplingParams, sample_next

    params = SamplingParams(max_new_tokens=steps)
    points = sorted({round(i * (steps - 1) / 8) for i in range(9)})
    gen = torch.Generator(device=device).manual_seed(0)
    per_step = []
    for t in points:
        seq = torch.randint(0, VOCAB, (BATCH, PROMPT + t), device=device)
        mask = torch.ones_like(seq)

        def one_step(seq: torch.Tensor = seq, mask: torch.Tensor = mask) -> None:
            logits = policy_logits(model, seq, mask)[:, -1, :]
            sample_next(logits, params, VOCAB, gen)

        with torch.no_grad():
            one_step()  # warm-up at this shape
            per_step.append(_timed(one_step, device, 2))
    total = 0.0
    for t in range(steps):
        k = max(i for i, p in enumerate(points) if p <= t)
        if k == len(points) - 1:
            total += per_step[k]
            continue
        lo, hi = points[k], points[k + 1]
        total += per_step[k] + (per_step[k + 1] - per_step[k]) * (t - lo) / (hi - lo)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--recompute-max-t", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default: torch's). On a CPU shared with other jobs, 1 "
        "avoids a 2-thread pool waiting for a second core on every small op",
    )
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from mcore_grpo.worker.cpu import cpu_device
    from mcore_grpo.worker.generation import SamplingParams, generate

    _, model, device_name = build(max(args.lengths))
    device = torch.device(device_name)
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (BATCH, PROMPT), device=device)
    mask = torch.ones_like(ids)
    print(
        f"device {device_name} ({torch.get_num_threads()} threads), GPTModel local spec 4 x 256, "
        f"vocab {VOCAB}, fp32, batch {BATCH}, prompt {PROMPT}"
    )

    def run(backend: str, steps: int) -> Callable[[], Any]:
        params = SamplingParams(max_new_tokens=steps, backend=backend)
        gen = torch.Generator(device=device).manual_seed(0)
        return lambda: generate(model, ids, mask, params, VOCAB, gen)

    rows = []
    with cpu_device(device_name):
        run("static_cache", 4)()  # warm-up
        run("recompute", 4)()
        for t in args.lengths:
            cached_s = _timed(run("static_cache", t), device, args.repeats)
            if t <= args.recompute_max_t:
                recompute_s = _timed(run("recompute", t), device, args.repeats)
                estimate_s = recompute_estimate(model, ids, t, device)
                how = f"measured (estimator check: {estimate_s:.2f} s)"
            else:
                recompute_s = recompute_estimate(model, ids, t, device)
                how = "ESTIMATED from 9 measured steps, not run end to end"
            bare_s = None
            if device.type == "cuda":
                bare_mcore_decode(model, ids, 4)
                bare_s = _timed(lambda t=t: bare_mcore_decode(model, ids, t), device, args.repeats)
            rows.append((t, cached_s, recompute_s, how, bare_s))
            print(
                f"T={t}: cached {cached_s:.2f} s, recompute {recompute_s:.2f} s ({how})", flush=True
            )

    print()
    print("| T | cached tok/s | recompute tok/s | ratio | cached ms/token-step | recompute |")
    print("|---|---|---|---|---|---|")
    for t, cached_s, recompute_s, how, _ in rows:
        tokens = BATCH * t
        print(
            f"| {t} | {tokens / cached_s:.0f} | {tokens / recompute_s:.1f} | "
            f"{recompute_s / cached_s:.1f}x | {1e3 * cached_s / t:.1f} | {how} |"
        )
    if device.type == "cuda":
        print()
        print("| T | cached tok/s | bare megatron-core static decode tok/s | cached / bare |")
        print("|---|---|---|---|")
        for t, cached_s, _, _, bare_s in rows:
            assert bare_s is not None
            tokens = BATCH * t
            print(
                f"| {t} | {tokens / cached_s:.0f} | {tokens / bare_s:.0f} | {bare_s / cached_s:.2f}x |"
            )
    else:
        print(
            "\nbare megatron-core static-context decode: skipped (CPU run; that comparison "
            "runs only with CUDA)"
        )


if __name__ == "__main__":
    main()
