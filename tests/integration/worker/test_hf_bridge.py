"""A Hugging Face checkpoint into the worker's model and back out, through Megatron-Bridge,
on the CPU and, where CUDA is available, on the GPU.

The oracle is `transformers` itself: the Megatron model Bridge builds from a tiny random
Qwen2/Qwen3 checkpoint (local layer spec, no Transformer Engine) gives the same logits as the
`transformers` model loaded from the same files, fp32, at TP=1 and TP=2 (gloo); and a model
whose weights changed after the import (as training changes them) exported by
`worker.hf_export` loads in `transformers` with the changed model's logits, its tokenizer
beside it. The TP/EP layouts run in spawned gloo ranks on the CPU; on a CUDA machine the same
checks run at TP=1 in-process on the GPU (NCCL world of 1). Bad input is refused in one line
naming the fix.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
import torch
from mcore_grpo.worker.config import ModelConfig, ParallelConfig, WorkerConfig
from mcore_grpo.worker.model import has_masked_softmax_kernel
from mcore_grpo.worker.tiny_hf_checkpoint import ARCHS, write_tiny_checkpoint

from tests.integration.worker.harness import spawn_ranks
from tests.support.device import MULTI_RANK_CPU, TEST_DEVICE
from tests.support.ports import free_port

TOLERANCE = 1e-4  # issue 23: fp32, max abs difference


def _tokens(device: str = "cpu") -> torch.Tensor:
    return torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(1)).to(device)


@contextlib.contextmanager
def _hf_model(
    checkpoint: str, tp: int, ep: int, device: Literal["cpu", "cuda"] = "cpu"
) -> Iterator[tuple[WorkerConfig, torch.nn.Module]]:
    """One rank: parallel state at `tp` x `ep` and the model Bridge builds from `checkpoint`
    on `device` (CPU redirects, where needed, and no_grad active in the block)."""
    from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
    from mcore_grpo.worker.model import build_gpt
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():  # in-process: a test before left it
        parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tp, expert_model_parallel_size=ep, expert_tensor_parallel_size=1
    )
    try:
        model_parallel_seed(0, device)
        config = WorkerConfig(
            device=device,
            model=ModelConfig(hf_checkpoint=checkpoint),
            parallel=ParallelConfig(
                tensor_model_parallel_size=tp,
                expert_model_parallel_size=ep,
                expert_tensor_parallel_size=1,
            ),
        )
        with cpu_device(device), torch.no_grad():
            yield config, build_gpt(config)[1]
    finally:
        parallel_state.destroy_model_parallel()


def _logits(gpt: torch.nn.Module, device: str = "cpu") -> torch.Tensor:
    from mcore_grpo.worker.packed_rows import policy_logits

    tokens = _tokens(device)
    return policy_logits(gpt, tokens, torch.ones_like(tokens, dtype=torch.bool)).cpu()


def _transformers_logits(checkpoint: Path | str, device: str = "cpu") -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    with torch.no_grad():
        model = AutoModelForCausalLM.from_pretrained(checkpoint).float().to(device)
        return model(_tokens(device)).logits.cpu()


def _megatron_logits(
    checkpoint: str, tp: int, ep: int = 1, device: Literal["cpu", "cuda"] = "cpu"
) -> torch.Tensor:
    """One rank: the model from `checkpoint` at `tp` x `ep`, its gathered logits."""
    with _hf_model(checkpoint, tp, ep, device) as (_, gpt):
        # Inference: megatron-core refuses an MoE layer at TP > 1 without sequence
        # parallelism in training mode only.
        gpt.eval()
        return _logits(gpt, device)


def _export_changed_model(
    checkpoint: str, out: str, tp: int, ep: int = 1, device: Literal["cpu", "cuda"] = "cpu"
) -> torch.Tensor:
    """One rank: the model from `checkpoint` at `tp` x `ep`, every weight moved (each TP shard
    by its own amount), exported to `out`; this rank's logits after."""
    from mcore_grpo.worker.hf_export import export_hf
    from megatron.core import parallel_state

    with _hf_model(checkpoint, tp, ep, device) as (config, gpt):
        # A TP shard moves by its own amount; a replicated weight (norms, row-parallel bias)
        # moves alike on every rank, as training keeps the copies equal.
        shard_moves = torch.Generator().manual_seed(
            100 + parallel_state.get_tensor_model_parallel_rank()
        )
        replica_moves = torch.Generator().manual_seed(99)
        for param in gpt.parameters():
            sharded = getattr(param, "tensor_model_parallel", False)
            moves = shard_moves if sharded else replica_moves
            param.add_(0.05 * torch.randn(param.shape, generator=moves).to(param.device))
        logits = _logits(gpt, device)
        export_hf(config, gpt, Path(out))
    return logits


# (arch, TP, EP): every architecture at TP 1 and 2 (Llama at TP 3: its 6:3 heads, like
# SmolLM2's 9:3); the MoE one also at EP 2 (experts split).
LAYOUTS = [(arch, tp, 1) for arch in ARCHS for tp in ((1, 3) if arch == "llama" else (1, 2))] + [
    ("qwen3_moe", 1, 2)
]


@pytest.mark.cpu_only(reason=MULTI_RANK_CPU)
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("arch", "tp", "ep"), LAYOUTS)
def test_megatron_logits_equal_transformers(tmp_path: Path, arch: str, tp: int, ep: int) -> None:
    checkpoint = write_tiny_checkpoint(tmp_path / arch, arch)  # type: ignore[arg-type]
    expected = _transformers_logits(checkpoint)
    by_rank = spawn_ranks(
        functools.partial(_megatron_logits, str(checkpoint), tp, ep), free_port(), world=tp * ep
    )
    for rank, logits in by_rank.items():
        diff = (logits[..., : expected.shape[-1]] - expected).abs().max().item()
        print(f"{arch} TP={tp} EP={ep} rank {rank}: max |megatron - transformers| = {diff:.2e}")
        assert diff <= TOLERANCE, f"{arch} TP={tp} EP={ep} rank {rank}: {diff:.2e}"


def test_a_directory_that_is_not_an_hf_checkpoint_is_refused_naming_the_fix(tmp_path: Path) -> None:
    from mcore_grpo.worker.model import build_gpt

    config = WorkerConfig(device=TEST_DEVICE, model=ModelConfig(hf_checkpoint=str(tmp_path)))
    with pytest.raises(ValueError, match=r"is not a Hugging Face checkpoint \(no config.json\)"):
        build_gpt(config)


@pytest.mark.cpu_only(reason=MULTI_RANK_CPU)
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("arch", "tp", "ep"),
    [("qwen2", 1, 1), ("qwen2", 2, 1), ("llama", 3, 1), ("qwen3_moe", 1, 2)],
)
def test_export_of_a_changed_model_loads_in_transformers_with_its_logits_and_tokenizer(
    tmp_path: Path, arch: str, tp: int, ep: int
) -> None:
    from mcore_grpo.grpo.policy_model.hf_model import task_hf_tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = write_tiny_checkpoint(tmp_path / "in", arch, tokenizer=task_hf_tokenizer())  # type: ignore[arg-type]
    out = tmp_path / "out"
    by_rank = spawn_ranks(
        functools.partial(_export_changed_model, str(source), str(out), tp, ep),
        free_port(),
        world=tp * ep,
    )
    with torch.no_grad():
        exported = AutoModelForCausalLM.from_pretrained(out).float()(_tokens()).logits
    before = AutoModelForCausalLM.from_pretrained(source).float()(_tokens()).logits
    assert (exported - before).abs().max().item() > 0.1  # the export holds the changed weights
    for rank, logits in by_rank.items():
        diff = (logits[..., : exported.shape[-1]] - exported).abs().max().item()
        print(
            f"export {arch} TP={tp} EP={ep} rank {rank}: max |megatron - exported transformers| "
            f"= {diff:.2e}"
        )
        assert diff <= TOLERANCE, f"{arch} TP={tp} EP={ep} rank {rank}: {diff:.2e}"
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer is not None
    assert (
        tokenizer("<bos> 7 + 1 =")["input_ids"] == task_hf_tokenizer()("<bos> 7 + 1 =")["input_ids"]
    )


def test_an_architecture_bridge_cannot_map_is_refused_naming_the_supported_ones(
    tmp_path: Path,
) -> None:
    from mcore_grpo.worker.model import build_gpt

    (tmp_path / "config.json").write_text('{"architectures": ["GPT2LMHeadModel"]}')
    config = WorkerConfig(device=TEST_DEVICE, model=ModelConfig(hf_checkpoint=str(tmp_path)))
    with pytest.raises(
        ValueError,
        match=r"GPT2LMHeadModel has no Megatron-Bridge mapping.*Qwen2ForCausalLM.*docs/models.md",
    ):
        build_gpt(config)


def test_a_tp_size_not_dividing_the_heads_is_refused_naming_the_sizes_that_fit(
    tmp_path: Path,
) -> None:
    from mcore_grpo.worker.model import build_gpt

    checkpoint = write_tiny_checkpoint(tmp_path / "qwen3", "qwen3")  # 4 heads, 2 kv heads
    config = WorkerConfig(
        device=TEST_DEVICE,
        model=ModelConfig(hf_checkpoint=str(checkpoint)),
        parallel=ParallelConfig(tensor_model_parallel_size=4),
    )
    with pytest.raises(ValueError, match=r"tensor_model_parallel_size 4 does not divide.*\[1, 2\]"):
        build_gpt(config)


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ARCHS)
def test_on_cuda_logits_equal_transformers_and_the_changed_model_exports(
    tmp_path: Path, world1: None, arch: str
) -> None:
    """The import and the export on the GPU, in-process at TP=1 (one GPU, NCCL world of 1):
    Bridge's model on `cuda` gives transformers' logits (fp32, transformers on the GPU too), and
    a changed model exported from GPU memory loads in transformers with its logits. The source
    has a tokenizer, as a real checkpoint does: Bridge's export copies it, and without one
    `transformers` 5.17 (the H200's) raises where 5.8 did not."""
    from mcore_grpo.grpo.policy_model.hf_model import task_hf_tokenizer

    checkpoint = write_tiny_checkpoint(tmp_path / arch, arch, tokenizer=task_hf_tokenizer())  # type: ignore[arg-type]
    expected = _transformers_logits(checkpoint, "cuda")
    logits = _megatron_logits(str(checkpoint), 1, 1, "cuda")
    diff = (logits[..., : expected.shape[-1]] - expected).abs().max().item()
    print(f"{arch} on cuda: max |megatron - transformers| = {diff:.2e}")
    assert diff <= TOLERANCE, f"{arch} on cuda: {diff:.2e}"

    changed = _export_changed_model(str(checkpoint), str(tmp_path / "out"), 1, 1, "cuda")
    exported = _transformers_logits(tmp_path / "out", "cuda")
    assert (exported - expected).abs().max().item() > 0.1  # the export holds the changed weights
    diff = (changed[..., : exported.shape[-1]] - exported).abs().max().item()
    print(f"export {arch} on cuda: max |megatron - exported transformers| = {diff:.2e}")
    assert diff <= TOLERANCE, f"export {arch} on cuda: {diff:.2e}"


def _provider(checkpoint: Path) -> Any:
    """The model provider Bridge gives for `checkpoint`, before the worker adjusts it."""
    from mcore_grpo.worker.bridge_source import import_auto_bridge

    return (
        import_auto_bridge().from_hf_pretrained(checkpoint).to_megatron_provider(load_weights=False)
    )


@pytest.mark.parametrize(
    ("arch", "refusal"),
    [
        ("llama", "apply_rope_fusion is not available"),
        ("qwen3_moe", "fused permutation is not available"),
    ],
)
def test_a_gpu_without_transformer_engine_gets_no_te_fusion(
    tmp_path: Path, arch: str, refusal: str
) -> None:
    """Bridge's Llama and Qwen3-MoE providers ask for TE's fused rope / MoE permutation, which
    megatron-core refuses at config time without TE, whatever the device (seen on an H200
    without TE); the worker's build turns them off for a CUDA device too, not only the CPU."""
    from mcore_grpo.worker.model import without_missing_kernels

    checkpoint = write_tiny_checkpoint(tmp_path / arch, arch)  # type: ignore[arg-type]
    as_bridge_gives_it = _provider(checkpoint)
    with pytest.raises(ValueError, match=refusal):
        as_bridge_gives_it.finalize()
    on_cuda = _provider(checkpoint)
    without_missing_kernels(on_cuda, cpu=False, te=False)
    on_cuda.finalize()
    assert not (on_cuda.apply_rope_fusion or on_cuda.moe_permute_fusion)


@pytest.mark.skipif(
    has_masked_softmax_kernel(),
    reason="apex's fused masked softmax is installed here: the fusion is kept",
)
def test_a_gpu_without_apex_gets_no_fused_masked_softmax(tmp_path: Path) -> None:
    """Bridge's Llama provider asks for the fused masked softmax; megatron-core's
    FusedScaleMaskSoftmax then imports apex's compiled kernel for a bf16 input (raised
    ModuleNotFoundError on an H200 without apex, SmolLM2 in bf16). The worker's build turns the
    fusion off on a GPU without apex too; the same softmax module then runs in bf16."""
    from mcore_grpo.worker.model import without_missing_kernels
    from megatron.core.fusions.fused_softmax import FusedScaleMaskSoftmax
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.utils import attention_mask_func

    checkpoint = write_tiny_checkpoint(tmp_path / "llama", "llama")

    def softmax(fusion: bool) -> torch.Tensor:
        module = FusedScaleMaskSoftmax(
            input_in_fp16=False,
            input_in_bf16=True,
            attn_mask_type=AttnMaskType.causal,
            scaled_masked_softmax_fusion=fusion,
            mask_func=attention_mask_func,
            softmax_in_fp32=True,
            scale=None,
        )
        scores = torch.randn(4, 4, 32, 32, dtype=torch.bfloat16)  # b, heads, sq, sk
        return module(scores, torch.ones(4, 1, 32, 32, dtype=torch.bool).triu(1))

    as_bridge_gives_it = _provider(checkpoint)
    assert as_bridge_gives_it.masked_softmax_fusion
    with pytest.raises(ModuleNotFoundError, match="scaled_masked_softmax_cuda"):
        softmax(as_bridge_gives_it.masked_softmax_fusion)
    on_cuda = _provider(checkpoint)
    without_missing_kernels(on_cuda, cpu=False, te=False)
    assert not on_cuda.masked_softmax_fusion
    assert softmax(on_cuda.masked_softmax_fusion).shape == (4, 4, 32, 32)
