"""SmolLM2-135M-Instruct through the worker against `transformers` on the same device and dtype:
logits and token logprobs on the same tokens, and sampling tokens/s at one batch.

For each precision (fp32, bf16) a fresh process builds the worker (Megatron-Bridge from the HF
directory, megatron-core's `Float16Module` in bf16) and loads the same directory in
`transformers` (`dtype=` that precision) on the same device, then prints:
- max |logits difference| and the share of positions whose argmax agrees (the worker's logits
  are fp32 from bf16 weights in bf16, as `transformers`' are in its dtype);
- max |logprob difference| of the given tokens (the worker's `get_logprobs`, its fused path,
  against `log_softmax` of `transformers`' logits);
- sampling tokens/s: the worker's `generate` (megatron-core's StaticInferenceContext) against
  `transformers.generate`, same batch, prompt length and new tokens, temperature 1, top-p 1,
  no stop token; the second of two calls each (the first warms up).

Printed, never asserted: the oracle's tolerance is the test suite's business
(tests/integration/worker/test_smollm2_bridge.py on the CPU).

    uv run python benchmarks/bench_smollm2_parity.py [--device cuda] [--model DIR_OR_GGUF]
        [--gen-batch 64] [--prompt 32] [--new 128] [--precisions float32 bfloat16]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "integration"))
sys.path.insert(0, str(ROOT))

from benchmarks.bench_vs_transformers import hf_sample  # noqa: E402


def model_dir(name: str | None) -> str:
    """An HF directory: `name` as a directory, a GGUF converted once, or SmolLM2 resolved."""
    from mcore_grpo.grpo.policy_model.pretrained import SMOLLM2, resolve_pretrained

    return resolve_pretrained(name or SMOLLM2)


def _init_rank(device: str) -> None:
    import torch
    import torch.distributed as dist
    from mcore_grpo.worker.parallel import backend_for

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    if device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(backend_for(device), rank=0, world_size=1)


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _timed(fn: Any, device: str) -> float:
    """Seconds of the second of two calls."""
    fn()
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def one_precision(args: argparse.Namespace) -> dict[str, Any]:
    """Both sides at `args.precision` on `args.device`, in this process."""
    import torch
    from mcore_grpo.grpo.algorithm.loss import worker_default_loss
    from mcore_grpo.worker.config import ModelConfig, WorkerConfig
    from mcore_grpo.worker.cpu import cpu_device
    from mcore_grpo.worker.generation import SamplingParams
    from mcore_grpo.worker.packed_rows import policy_logits
    from mcore_grpo.worker.policy_worker import MegatronPolicyWorker
    from transformers import AutoModelForCausalLM

    device, checkpoint = args.device, args.checkpoint
    dtype = getattr(torch, args.precision)
    _init_rank(device)
    vocab = json.loads((Path(checkpoint) / "config.json").read_text())["vocab_size"]
    config = WorkerConfig(
        device=device,
        precision=args.precision,
        micro_batch_size=args.rows,
        model=ModelConfig(
            hf_checkpoint=checkpoint,
            vocab_size=vocab,
            max_sequence_length=max(args.seq, args.prompt + args.new),
        ),
    ).validate()
    worker = MegatronPolicyWorker(config, loss_sum_fn=worker_default_loss(config.loss))
    hf = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=dtype).to(device).eval()

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (args.rows, args.seq), generator=g).to(device)
    ones = torch.ones_like(ids)
    worker.prepare_for_lp_inference()
    with torch.no_grad():
        expected = hf(ids).logits.float()
        with cpu_device(device):
            worker.policy.ddp.eval()
            ours = policy_logits(worker.policy.ddp, ids, ones.bool())[..., :vocab].float()
    logits_diff = (ours - expected).abs().max().item()
    argmax_agree = (ours.argmax(-1) == expected.argmax(-1)).float().mean().item()
    batch = {"input_ids": ids, "attention_mask": ones, "token_mask": ones}
    worker_lp = worker.get_logprobs(batch)[:, 1:].float()
    hf_lp = torch.log_softmax(expected[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    logprob_diff = (worker_lp - hf_lp).abs().max().item()

    prompt = torch.randint(0, vocab, (args.gen_batch, args.prompt), generator=g).to(device)
    params = SamplingParams(max_new_tokens=args.new, pad_token_id=0)
    gen = torch.Generator(device=device).manual_seed(0)
    worker.prepare_for_generation()
    worker_s = _timed(lambda: worker.generate(prompt, torch.ones_like(prompt), params, gen), device)
    worker.finish_generation()

    hf_s = _timed(lambda: hf_sample(hf, prompt, args.new), device)
    new_tokens = args.gen_batch * args.new
    return {
        "precision": args.precision,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "layer_spec": worker.policy.layer_spec,
        "max_abs_logits_diff": logits_diff,
        "argmax_agreement": argmax_agree,
        "max_abs_logprob_diff": logprob_diff,
        "worker_sampling_tokens_per_s": new_tokens / worker_s,
        "transformers_sampling_tokens_per_s": new_tokens / hf_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda where torch sees a GPU, else cpu")
    parser.add_argument("--model", default=None, help="HF directory or GGUF (default: SmolLM2)")
    parser.add_argument("--rows", type=int, default=8, help="rows of the logits comparison")
    parser.add_argument("--seq", type=int, default=128, help="tokens per row of the comparison")
    parser.add_argument("--gen-batch", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument(
        "--precisions", nargs="+", default=["float32", "bfloat16"], choices=("float32", "bfloat16")
    )
    parser.add_argument("--precision", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.precision:
        print(json.dumps(one_precision(args)))
        return 0
    checkpoint = model_dir(args.model)
    shared = ["--device", args.device, "--checkpoint", checkpoint, "--rows", str(args.rows)]
    shared += ["--seq", str(args.seq), "--gen-batch", str(args.gen_batch)]
    shared += ["--prompt", str(args.prompt), "--new", str(args.new)]
    print(
        f"SmolLM2-135M-Instruct on {args.device}: logits over {args.rows} x {args.seq} tokens; "
        f"sampling batch {args.gen_batch}, prompt {args.prompt}, {args.new} new tokens"
    )
    print(
        "| precision | max abs logits diff | argmax agree | max abs logprob diff "
        "| worker sampling tok/s | transformers tok/s | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    failed = 0
    for precision in args.precisions:
        proc = subprocess.run(
            [sys.executable, __file__, *shared, "--precision", precision],
            capture_output=True,
            text=True,
            check=False,
        )
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            print(f"| {precision} | FAILED (exit {proc.returncode}) |\n{proc.stderr[-4000:]}")
            failed += 1
            continue
        r = json.loads(lines[-1])
        w, t = r["worker_sampling_tokens_per_s"], r["transformers_sampling_tokens_per_s"]
        print(
            f"| {precision} | {r['max_abs_logits_diff']:.2e} | {r['argmax_agreement']:.4f} "
            f"| {r['max_abs_logprob_diff']:.2e} | {w:,.0f} | {t:,.0f} | {w / t:.2f}x |"
        )
        print(json.dumps(r), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
