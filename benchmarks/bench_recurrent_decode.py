"""Decoding a model with recurrent layers on CPU: the worker against `transformers`' torch path.

Issue 48 asks for a hybrid row's CPU decode step, with megatron-core's torch kernels, measured
against `transformers`' own torch path at the same shape. The worker decodes such models through
the layers' recurrent state (`state_sampler`, on the Megatron-LM patches mamba-static-decode and
gated-delta-net-static-inference), as `transformers.generate` does with its cache; before those
patches it recomputed the whole prefix per token. This prints all three: the worker's default
backend (through the state), the worker's recompute, and `transformers.generate`.

Model: the model matrix's tiny config of `--arch` (`model_matrix.families`; Qwen3.5 has
one linear-attention and one full-attention layer, NemotronH a Mamba-2, an MoE, an attention
and an MLP layer, Falcon-H1 two parallel Mamba-2 + attention + MLP layers), hidden size
`--hidden` (intermediate 2x), fp32, random weights, written once by `transformers` and imported
through Bridge as the worker does. Batch `--batch`, `--prompt` prompt tokens, greedy, exactly T
new tokens for each T in `--lengths`, after one untimed warm-up generation per backend
(megatron-core's `jit_fuser` compiles per new shape). Each figure is the best of `--repeats`
runs; ms/token = wall time / T.

Run: .venv/bin/python benchmarks/bench_recurrent_decode.py [--arch NemotronHForCausalLM]
    [--lengths 16 64] [--hidden 256]
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

ARCHS = ("Qwen3_5ForCausalLM", "NemotronHForCausalLM", "FalconH1ForCausalLM")


def write_checkpoint(path: Path, arch: str, hidden: int) -> int:
    """The tiny `arch` at `hidden` (random fp32 weights); its vocabulary size."""
    import transformers
    from model_matrix import families

    config = families.tiny_config(arch)
    config.hidden_size = hidden
    config.intermediate_size = 2 * hidden
    torch.manual_seed(0)
    getattr(transformers, arch)(config).float().save_pretrained(path)
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
    parser.add_argument("--arch", choices=ARCHS, default=ARCHS[0])
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
    from mcore_grpo.worker.generation import generate, resolve_backend
    from mcore_grpo.worker.sampling import RECOMPUTE, STATIC_CACHE, SamplingParams
    from model_matrix import checks
    from transformers import AutoModelForCausalLM

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / args.arch
        vocab = write_checkpoint(checkpoint, args.arch, args.hidden)
        prompts = torch.randint(
            0, vocab, (args.batch, args.prompt), generator=torch.Generator().manual_seed(0)
        )
        hf = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
        print(
            f"{args.arch} hidden {args.hidden}, batch {args.batch}, prompt {args.prompt}, fp32, "
            f"{args.threads} torch threads, best of {args.repeats}"
        )
        print(
            f"{'T':>5} {'worker ms/token':>16} {'recompute ms/token':>19} "
            f"{'transformers ms/token':>22} {'worker/transformers':>20}"
        )
        mask = torch.ones_like(prompts)
        with checks.imported_model(checkpoint, 1, 1, vocab) as (_, gpt):
            # Warm-up, untimed: megatron-core's `jit_fuser` functions compile per new shape.
            for backend_name in (STATIC_CACHE, RECOMPUTE):
                warm = SamplingParams(max_new_tokens=3, greedy=True, backend=backend_name)
                generate(gpt, prompts, mask, warm, vocab)
            for new_tokens in args.lengths:
                params = SamplingParams(max_new_tokens=new_tokens, greedy=True)
                backend, why = resolve_backend(gpt, params)
                ours = best_of(args.repeats, partial(generate, gpt, prompts, mask, params, vocab))
                recompute_params = SamplingParams(
                    max_new_tokens=new_tokens, greedy=True, backend=RECOMPUTE
                )
                recompute = best_of(
                    args.repeats, partial(generate, gpt, prompts, mask, recompute_params, vocab)
                )
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
                    f"{1000 * recompute / new_tokens:>19.1f} "
                    f"{1000 * theirs / new_tokens:>22.1f} {ours / theirs:>19.2f}x"
                )
        print(f"worker backend: {backend} ({why})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
