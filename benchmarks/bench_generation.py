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

`--step-curve`: where a decode step's time goes as the cache grows. One decode step of the
cached sampler (its inputs: one token, a key-padding view, the position) is timed at cache
lengths L = prompt + T for each T, interleaved over the lengths (median and min of
`--step-repeats`), the KV cache filled with random values first. Each length is profiled
(torch.profiler, self CPU time) into: attention over the cache (QK^T `baddbmm`, PV `bmm`,
softmax, mask fill), rope (megatron-core's `apply_rotary_pos_emb` in attention: at the pin
the static context caches UNrotated keys and rotates all L of them every step), dense (the
linear layers' `mm`/`addmm`, gelu, layer norms) and the rest (dispatch, views, embedding,
sampling-free glue). Next to it the analytic per-step work: FLOPs and bytes read of the
dense layers (weights are read once per step, shared by the batch) against attention over
L cached keys (each row reads its own cache, 2 * L * hidden floats per layer).

`--hidden/--layers/--heads/--ffn/--rope/--batch` change the model and the batch (e.g.
`--hidden 1024 --layers 2 --heads 16 --cached-only --step-curve` for a model where
attention's share is smaller); `--cached-only` skips the recompute sampler.

Run: .venv/bin/python benchmarks/bench_generation.py [--lengths 64 256 1024]
     [--recompute-max-t 256] [--repeats 1] [--threads 1] [--step-curve] [--cached-only]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPT, VOCAB = 16, 4096


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


@dataclass(frozen=True)
class Shape:
    """The benchmark model's dimensions and the batch it decodes."""

    layers: int = 4
    hidden: int = 256
    heads: int = 4
    ffn: int = 1024
    rope: bool = False
    batch: int = 8

    def describe(self) -> str:
        pos = "rope" if self.rope else "learned absolute positions"
        return (
            f"GPTModel local spec {self.layers} x {self.hidden}, {self.heads} heads, ffn "
            f"{self.ffn}, {pos}"
        )


def build(max_t: int, shape: Shape) -> tuple[Any, torch.nn.Module, str]:
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
            num_layers=shape.layers,
            hidden_size=shape.hidden,
            num_attention_heads=shape.heads,
            ffn_hidden_size=shape.ffn,
            vocab_size=VOCAB,
            max_sequence_length=PROMPT + max_t,
            position_embedding_type="rope" if shape.rope else "learned_absolute",
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
    from mcore_grpo.worker.packed_rows import policy_logits
    from mcore_grpo.worker.sampling import SamplingParams, sample_next

    params = SamplingParams(max_new_tokens=steps)
    points = sorted({round(i * (steps - 1) / 8) for i in range(9)})
    gen = torch.Generator(device=device).manual_seed(0)
    per_step = []
    for t in points:
        seq = torch.randint(0, VOCAB, (ids.shape[0], PROMPT + t), device=device)
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


# Profiler op names per category of a decode step (self CPU time); the rest is "other".
ATTENTION_OPS = ("aten::baddbmm", "aten::bmm", "aten::_softmax", "aten::masked_fill_")
DENSE_OPS = ("aten::mm", "aten::addmm", "aten::gelu", "aten::native_layer_norm")
ROPE_RANGE = "bench::apply_rotary_pos_emb"


@contextmanager
def rope_labelled() -> Iterator[None]:
    """Label megatron-core attention's rope calls for the profiler (the same function, inside
    a `record_function` range), restored on exit."""
    import megatron.core.transformer.attention as attention

    original = attention.apply_rotary_pos_emb

    def labelled(*args: Any, **kwargs: Any) -> Any:
        with torch.profiler.record_function(ROPE_RANGE):
            return original(*args, **kwargs)

    attention.apply_rotary_pos_emb = labelled  # type: ignore[assignment]
    try:
        yield
    finally:
        attention.apply_rotary_pos_emb = original


def step_work(shape: Shape, length: int) -> dict[str, float]:
    """Analytic work of one decode step over `length` cached keys, fp32."""
    h, layers, batch = shape.hidden, shape.layers, shape.batch
    weights = layers * (4 * h * h + 2 * h * shape.ffn) + h * VOCAB  # qkv, proj, fc1, fc2, logits
    return {
        "dense_flops": 2.0 * batch * weights,
        "attn_flops": 2.0 * 2 * batch * layers * length * h,  # QK^T and PV
        "dense_bytes": 4.0 * weights,  # read once, shared by the batch
        "attn_bytes": 4.0 * 2 * batch * layers * length * h,  # every row's K and V
    }


def decode_step_curve(
    model: torch.nn.Module, shape: Shape, lengths: list[int], repeats: int
) -> list[tuple[int, float, float, dict[str, float]]]:
    """(L, median s, min s, self-CPU ms per category) of one cached decode step per length."""
    from mcore_grpo.worker.forward import model_logits
    from megatron.core.inference.contexts import StaticInferenceContext
    from megatron.core.inference.utils import InferenceMode

    device = next(model.parameters()).device
    top = max(lengths)
    batch = shape.batch
    context = StaticInferenceContext(batch, top)
    ids = torch.randint(0, VOCAB, (batch, PROMPT), device=device)
    key_padding = torch.zeros((batch, 1, 1, top), dtype=torch.bool, device=device)
    token = ids[:, -1:]
    with torch.no_grad(), InferenceMode.active():
        positions = torch.arange(ids.shape[1], device=device).expand_as(ids)
        model_logits(model, ids, positions, None, context)  # allocates the cache
        for keys, values in context.key_value_memory_dict.values():
            keys.normal_()
            values.normal_()
        context.enable_decode_mode()

        def step(length: int) -> None:
            # The step the sampler takes with length - 1 tokens cached: one more, L keys.
            context.sequence_len_offset = length - 1
            position = torch.full((batch, 1), length - 1, dtype=torch.long, device=device)
            model_logits(model, token, position, key_padding[..., :length], context)

        times: dict[int, list[float]] = {n: [] for n in lengths}
        for n in lengths:
            step(n)  # warm-up
        for _ in range(repeats):
            for n in lengths:  # interleaved: a load spike hits every length alike
                times[n].append(_timed(lambda n=n: step(n), device, 1))
        rows = []
        with rope_labelled():
            for n in lengths:
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
                    for _ in range(5):
                        step(n)
                split = {"attention": 0.0, "rope": 0.0, "dense": 0.0, "other": 0.0}
                for event in p.key_averages():
                    ms = event.self_cpu_time_total / 1e3 / 5
                    if event.key == ROPE_RANGE:
                        split["rope"] += event.cpu_time_total / 1e3 / 5 - ms
                    elif event.key in ATTENTION_OPS:
                        split["attention"] += ms
                    elif event.key in DENSE_OPS:
                        split["dense"] += ms
                    else:
                        split["other"] += ms
                split["other"] -= split["rope"]  # rope's child ops were counted there
                rows.append((n, statistics.median(times[n]), min(times[n]), split))
    return rows


def print_step_curve(shape: Shape, rows: list[tuple[int, float, float, dict[str, float]]]) -> None:
    """The step curve table and the analytic work next to it."""
    print()
    print(
        "| cache length L | step ms (median) | step ms (min) | attention over cache ms | "
        "rope ms | dense ms | other ms | attn/dense FLOPs | attn/dense bytes read |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n, median_s, min_s, split in rows:
        work = step_work(shape, n)
        print(
            f"| {n} | {1e3 * median_s:.2f} | {1e3 * min_s:.2f} | {split['attention']:.2f} | "
            f"{split['rope']:.2f} | {split['dense']:.2f} | {split['other']:.2f} | "
            f"{work['attn_flops'] / work['dense_flops']:.2f} | "
            f"{work['attn_bytes'] / work['dense_bytes']:.2f} |"
        )
    first = step_work(shape, rows[0][0])
    print(
        f"(profiled ms: self CPU time per step, mean of 5 profiled steps; dense per step "
        f"{first['dense_flops'] / 1e6:.1f} MFLOP, {first['dense_bytes'] / 2**20:.1f} MiB of "
        "weights)"
    )


def _load() -> str:
    """The 1-minute load average (a shared machine's figures are read against it)."""
    return f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--recompute-max-t", type=int, default=256)
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs per T (median; cached runs interleaved)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default: torch's). On a CPU shared with other jobs, 1 "
        "avoids a 2-thread pool waiting for a second core on every small op",
    )
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=None, help="default 4 x hidden")
    parser.add_argument("--rope", action="store_true", help="rope instead of learned positions")
    parser.add_argument("--batch", type=int, default=8, help="rows decoded together")
    parser.add_argument("--cached-only", action="store_true", help="skip the recompute sampler")
    parser.add_argument(
        "--step-curve", action="store_true", help="time and profile one decode step per length"
    )
    parser.add_argument("--step-repeats", type=int, default=20)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from mcore_grpo.worker.cpu import cpu_device
    from mcore_grpo.worker.generation import SamplingParams, generate

    shape = Shape(
        layers=args.layers,
        hidden=args.hidden,
        heads=args.heads,
        ffn=args.ffn or 4 * args.hidden,
        rope=args.rope,
        batch=args.batch,
    )
    _, model, device_name = build(max(args.lengths), shape)
    device = torch.device(device_name)
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (shape.batch, PROMPT), device=device)
    mask = torch.ones_like(ids)
    print(
        f"device {device_name} ({torch.get_num_threads()} threads), {shape.describe()}, "
        f"vocab {VOCAB}, fp32, batch {shape.batch}, prompt {PROMPT}; load average {_load()}"
    )

    def run(backend: str, steps: int) -> Callable[[], Any]:
        params = SamplingParams(max_new_tokens=steps, backend=backend)
        gen = torch.Generator(device=device).manual_seed(0)
        return lambda: generate(model, ids, mask, params, VOCAB, gen)

    rows = []
    with cpu_device(device_name):
        run("static_cache", 4)()  # warm-up
        if not args.cached_only:
            run("recompute", 4)()
        # Cached runs interleaved over T, round by round: a load spike on a shared machine
        # hits every length alike instead of one.
        cached_runs: dict[int, list[float]] = {t: [] for t in args.lengths}
        for _ in range(args.repeats):
            for t in args.lengths:
                cached_runs[t].append(_timed(run("static_cache", t), device, 1))
        for t in args.lengths:
            cached_s = statistics.median(cached_runs[t])
            recompute_s, how = None, "not run (--cached-only)"
            if args.cached_only:
                pass
            elif t <= args.recompute_max_t:
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
            recompute_text = "-" if recompute_s is None else f"{recompute_s:.2f} s"
            print(
                f"T={t}: cached {cached_s:.2f} s, recompute {recompute_text} ({how}); "
                f"load {_load()}",
                flush=True,
            )
        curve = None
        if args.step_curve:
            lengths = [PROMPT + t for t in args.lengths]
            curve = decode_step_curve(model, shape, lengths, args.step_repeats)

    print()
    print("| T | cached tok/s | recompute tok/s | ratio | cached ms/token-step | recompute |")
    print("|---|---|---|---|---|---|")
    for t, cached_s, recompute_s, how, _ in rows:
        tokens = shape.batch * t
        recompute = "-" if recompute_s is None else f"{tokens / recompute_s:.1f}"
        ratio = "-" if recompute_s is None else f"{recompute_s / cached_s:.1f}x"
        print(
            f"| {t} | {tokens / cached_s:.0f} | {recompute} | {ratio} | "
            f"{1e3 * cached_s / t:.1f} | {how} |"
        )
    if curve is not None:
        print_step_curve(shape, curve)
    print(f"\nload average at the end: {_load()}")
    if device.type == "cuda":
        print()
        print("| T | cached tok/s | bare megatron-core static decode tok/s | cached / bare |")
        print("|---|---|---|---|")
        for t, cached_s, _, _, bare_s in rows:
            assert bare_s is not None
            tokens = shape.batch * t
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
