"""A Hugging Face checkpoint into the worker's model through Megatron-Bridge, on the CPU.

The oracle is `transformers` itself: the Megatron model Bridge builds from a tiny random
Qwen2/Qwen3 checkpoint (local layer spec, no Transformer Engine) gives the same logits as the
`transformers` model loaded from the same files, fp32, at TP=1 and TP=2 (gloo).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from mcore_grpo.worker.config import ModelConfig, ParallelConfig, WorkerConfig
from mcore_grpo.worker.tiny_hf_checkpoint import ARCHS, write_tiny_checkpoint

from tests.integration.worker.harness import spawn_ranks
from tests.support.ports import free_port

TOLERANCE = 1e-4  # issue 23: fp32, max abs difference


def _tokens() -> torch.Tensor:
    return torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(1))


def _megatron_logits(checkpoint: str, tp: int) -> torch.Tensor:
    """One rank: parallel state at `tp`, the model from `checkpoint`, gathered logits."""
    from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
    from mcore_grpo.worker.forward import policy_logits
    from mcore_grpo.worker.model import build_gpt
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)
    try:
        model_parallel_seed(0, "cpu")
        config = WorkerConfig(
            device="cpu",
            model=ModelConfig(hf_checkpoint=checkpoint),
            parallel=ParallelConfig(tensor_model_parallel_size=tp),
        )
        with cpu_device("cpu"), torch.no_grad():
            _, gpt = build_gpt(config)
            tokens = _tokens()
            return policy_logits(gpt, tokens, torch.ones_like(tokens, dtype=torch.bool))
    finally:
        parallel_state.destroy_model_parallel()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("tp", [1, 2])
def test_megatron_logits_equal_transformers(tmp_path: Path, arch: str, tp: int) -> None:
    from transformers import AutoModelForCausalLM

    checkpoint = write_tiny_checkpoint(tmp_path / arch, arch)  # type: ignore[arg-type]
    with torch.no_grad():
        expected = AutoModelForCausalLM.from_pretrained(checkpoint).float()(_tokens()).logits
    by_rank = spawn_ranks(
        functools.partial(_megatron_logits, str(checkpoint), tp), free_port(), world=tp
    )
    for rank, logits in by_rank.items():
        diff = (logits[..., : expected.shape[-1]] - expected).abs().max().item()
        print(f"{arch} TP={tp} rank {rank}: max |megatron - transformers| = {diff:.2e}")
        assert diff <= TOLERANCE, f"{arch} TP={tp} rank {rank}: {diff:.2e}"


def test_a_directory_that_is_not_an_hf_checkpoint_is_refused_naming_the_fix(tmp_path: Path) -> None:
    from mcore_grpo.worker.model import build_gpt

    config = WorkerConfig(device="cpu", model=ModelConfig(hf_checkpoint=str(tmp_path)))
    with pytest.raises(ValueError, match=r"is not a Hugging Face checkpoint \(no config.json\)"):
        build_gpt(config)
