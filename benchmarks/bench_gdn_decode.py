"""Decoding a gated delta net model on CPU: the worker against `transformers`' torch path.

Issue 48 asks for a hybrid row's CPU decode step, with megatron-core's torch kernels (the
Megatron-LM patch gated-delta-net-without-fla), measured against `transformers`' own torch
path at the same shape. At the pin megatron-core's `GatedDeltaNet` keeps no inference state, so
the worker decodes such a model by recompute (the whole prefix per token,
`static_cache_sampler.cache_unsupported_reason`); `transformers.generate` carries the conv and
recurrent state and the attention layers' KV cache. This prints both, so the cost of the
missing state is a figure, not a guess.

Model: the model matrix's tiny Qwen3.5 (`mcore_grpo.models.families`, one linear-attention and
one full-attention layer), hidden size `--hidden` (intermediate 2x), fp32, random weights,
written once by `transformers` and imported through Bridge as the worker does. Batch
`--batch`, `--prompt` prompt tokens, greedy, exactly T new tokens for each T in `--lengths`.
Each figure is the best of `--repeats` runs; ms/token = wall time / T.

Run: .venv/bin/python benchmarks/bench_gdn_decode.py [--lengths 16 64] [--hidden 256]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

ARCH = "Qwen3_5ForCausalLM"


def write_checkpoint(path: Path, hidden: int) -> int:
    """The tiny Qwen3.5 at `hidden` (random fp32 weights); its vocabulary size."""
    import transformers
    from mcore_grpo.models import families

    config = families.tiny_config(ARCH)
    config.hidden_size = hidden
    config.intermediate_size = 2 * hidden
    torch.manual_seed(0)
    getattr(transformers, ARCH)(config).float().save_pretrained(path)
    return config.vocab_size


def best_of(repeats: int, run: Callable[[], Any]) -> float:
    """Fastest wall time of `repeats` calls of `run`, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import torch.distributed as dist
    from mcore_grpo.grpo.cluster.placement import free_port
    from mcore_grpo.models import checks
    from mcore_grpo.worker.generation import generate, resolve_backend
    from mcore_grpo.worker.sampling import SamplingParams
    from transformers import AutoModelForCausalLM

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / ARCH
        vocab = write_checkpoint(checkpoint, args.hidden)
        prompts = torch.randint(
            0, vocab, (args.batch, args.prompt), generator=torch.Generator().manual_seed(0)
        )
        hf = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
        print(
            f"{ARCH} hidden {args.hidden}, batch {args.batch}, prompt {args.prompt}, fp32, "
            f"{args.threads} torch threads, best of {args.repeats}"
        )
        print(f"{'T':>5} {'worker ms/token':>16} {'transformers ms/token':>22} {'ratio':>7}")
        with checks.imported_model(checkpoint, 1, 1, vocab) as (_, gpt):
            for new_tokens in args.lengths:
                params = SamplingParams(max_new_tokens=new_tokens, greedy=True)
                backend, why = resolve_backend(gpt, params)
                mask = torch.ones_like(prompts)
                ours = best_of(args.repeats, partial(generate, gpt, prompts, mask, params, vocab))
                with torch.no_grad():
                    theirs = best_of(
                        args.repeats,
                        partial(
                            hf.generate,
                            prompts,
                            max_new_tokens=new_tokens,
                            min_new_tokens=new_tokens,
                            do_sample=False,
                        ),
                    )
                print(
                    f"{new_tokens:>5} {1000 * ours / new_tokens:>16.1f} "
                    f"{1000 * theirs / new_tokens:>22.1f} {ours / theirs:>6.1f}x"
                )
        print(f"worker backend: {backend} ({why})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
