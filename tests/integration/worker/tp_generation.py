"""Cached sampling at TP=2 (2 gloo ranks) against TP=1 with the same weights.

The TP=2 ranks generate with the KV cache (greedy and seeded sampling, left-padded prompts);
their shards are gathered into full tensors (`tp_parity._full`) and loaded into a TP=1 model
in this process, which generates with the recompute sampler (the reference forward).
"""

from __future__ import annotations

from typing import Any

import torch
from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
from mcore_grpo.worker.generation import GenerationOutput, SamplingParams, generate
from mcore_grpo.worker.model import build_gpt
from mcore_grpo.worker.parallel import init_model_parallel
from mcore_grpo.worker.reference import _load_in_place

from tests.integration.worker.harness import make_worker, prompts, spawn2
from tests.integration.worker.tp_parity import REAL, _config, _full
from tests.support.ports import free_port

CASES: dict[str, dict[str, Any]] = {
    "greedy": {"temperature": 1e-4, "max_new_tokens": 12},
    "sampled": {"temperature": 1.0, "top_p": 0.9, "max_new_tokens": 12},
}


def _generate_all(model: torch.nn.Module, backend: str) -> dict[str, GenerationOutput]:
    ids, mask = prompts(rows=4, length=6, vocab=REAL)
    out = {}
    with cpu_device("cpu"):
        for name, kw in CASES.items():
            params = SamplingParams(backend=backend, **kw)
            out[name] = generate(model, ids, mask, params, REAL, torch.Generator().manual_seed(9))
    return out


def tp2_generate() -> dict[str, Any]:

    worker = make_worker(_config(tp=2))
    worker.prepare_for_generation()
    worker.policy.ddp.eval()
    outs = _generate_all(worker.policy.ddp, "static_cache")
    # Lists, not tensors (shared-memory tensors die with the rank process).
    return {
        "weights": {n: t.tolist() for n, t in _full(worker.policy.gpt).items()},
        "tokens": {k: o.output_ids.tolist() for k, o in outs.items()},
        "logprobs": {k: o.logprobs.tolist() for k, o in outs.items()},
    }


def compare_tp2_with_tp1() -> dict[str, Any]:
    """Figures: whether the ranks agree, token equality and logprob diff per case."""
    raw = spawn2(tp2_generate, free_port())
    ranks_agree = raw[0]["tokens"] == raw[1]["tokens"]
    tp1 = _config(tp=1)
    init_model_parallel(tp1)
    with cpu_device("cpu"), torch.no_grad():
        model_parallel_seed(tp1.seed, "cpu")
        _, ref = build_gpt(tp1)
        weights = {n: torch.tensor(v, dtype=torch.float32) for n, v in raw[0]["weights"].items()}
        _load_in_place(ref, weights)
    ref.eval()
    reference = _generate_all(ref, "recompute")
    cached_tp1 = _generate_all(ref, "static_cache")
    figures: dict[str, Any] = {"ranks_agree": ranks_agree}
    for name, out in reference.items():
        tokens = torch.tensor(raw[0]["tokens"][name])
        lp = torch.tensor(raw[0]["logprobs"][name])
        figures[f"{name}_tokens_equal"] = torch.equal(tokens, out.output_ids)
        figures[f"{name}_tp1_cached_equal"] = torch.equal(tokens, cached_tp1[name].output_ids)
        figures[f"{name}_logprob_max_abs_diff"] = float((lp - out.logprobs).abs().max())
        figures[f"{name}_distinct_tokens"] = len(set(tokens[:, 6:].flatten().tolist()))
    return figures
