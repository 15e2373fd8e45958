"""Why an upstream test failed on this CPU machine, when the only reason is missing hardware
or a CUDA-only package: the table the CPU plugin (cpu.py) turns into skip reasons.

Why its own module: the plugin installs redirects and hooks; this is the one list of causes,
each with the upstream message it recognises, read and extended on its own.
"""

from __future__ import annotations

import ast
import linecache
import re
from collections.abc import Callable

Matcher = Callable[[BaseException], str | None]


def _message(needs: str, types: tuple[type[BaseException], ...], pattern: str) -> Matcher:
    """Matches an exception of `types` whose message contains `pattern` (a regex)."""
    regex = re.compile(pattern)

    def match(exc: BaseException) -> str | None:
        return needs if isinstance(exc, types) and regex.search(str(exc)) else None

    return match


def _import_of_cuda_only_package(exc: BaseException) -> str | None:
    """The CUDA-only package (a key of CUDA_ONLY_PACKAGES) an ImportError is about."""
    if not isinstance(exc, ImportError):
        return None
    name = exc.name
    if name is None:
        found = re.search(r"No module named '([\w.]+)'", str(exc))
        name = found.group(1) if found else None
    root = name.split(".", 1)[0] if name else None
    return root if root in CUDA_ONLY_PACKAGES else None


def _called_placeholder(flag: str, needs: str) -> Matcher:
    """Matches "'NoneType' object is not callable" raised by calling a module global that the
    module set to None because an import failed, as its `flag` (e.g. HAVE_TE) records.

    megatron/core/models/gpt/gpt_layer_specs.py:54 sets `TESpecProvider = None` without TE, and
    `get_gpt_layer_with_transformer_engine_submodules` calls it (:233), as most tests build the
    TE layer spec. The callee is read from the failing instruction's source span.
    """

    def match(exc: BaseException) -> str | None:
        if not isinstance(exc, TypeError) or "'NoneType' object is not callable" not in str(exc):
            return None
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is None or tb.tb_frame.f_globals.get(flag, True) is not False:
            return None
        frame = tb.tb_frame
        positions = list(frame.f_code.co_positions())
        if tb.tb_lasti // 2 >= len(positions):
            return None
        line, end_line, col, end_col = positions[tb.tb_lasti // 2]
        if line is None or line != end_line or col is None or end_col is None:
            return None
        source = linecache.getline(frame.f_code.co_filename, line).encode()[col:end_col]
        try:
            call = ast.parse(source.decode().strip(), mode="eval").body
        except SyntaxError:
            return None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            return None
        sentinel = object()
        return needs if frame.f_globals.get(call.func.id, sentinel) is None else None

    return match


# Packages that exist only for CUDA; an ImportError of one means "needs <package>".
CUDA_ONLY_PACKAGES: dict[str, str] = {
    "transformer_engine": "Transformer Engine: CUDA kernels, no CPU build",
    "transformer_engine_torch": "Transformer Engine's torch extension",
    "apex": "NVIDIA Apex: fused CUDA kernels",
    "flash_attn": "FlashAttention 2: CUDA kernels",
    "flash_attn_interface": "FlashAttention 3: CUDA (Hopper) kernels",
    "mamba_ssm": "Mamba selective-scan CUDA kernels",
    "causal_conv1d": "causal-conv1d CUDA kernels",
    "fla": "flash-linear-attention: Triton GPU kernels",
    "grouped_gemm": "grouped GEMM CUDA kernels (MoE)",
    "deep_ep": "DeepEP: NVSHMEM/CUDA expert-parallel dispatch",
    "flashinfer": "FlashInfer: CUDA kernels",
    "nvshmem": "NVSHMEM: GPU-initiated communication",
    "cuda": "cuda-python: bindings to the CUDA driver",
    "tensorrt_llm": "TensorRT-LLM: CUDA only",
}

_ERRORS = (AssertionError, RuntimeError, ValueError, ImportError)

# The failures that only say what is missing on a CUDA-less machine, each becoming a skip
# "upstream-cpu: needs <what> (<first line of the exception>)". Nothing else is matched.
CAUSES: tuple[Matcher, ...] = (
    # torch built without CUDA: torch/cuda/__init__.py `_lazy_init`.
    _message("CUDA", (AssertionError, RuntimeError), "Torch not compiled with CUDA"),
    # torch built with CUDA on a machine without the NVIDIA driver: `_lazy_init`.
    _message("CUDA", (RuntimeError,), "Found no NVIDIA driver"),
    # A driver but no visible device (CUDA_VISIBLE_DEVICES="", a container without GPUs).
    _message("CUDA", (RuntimeError,), "No CUDA GPUs are available"),
    # CUDA runtime calls that bypass `_lazy_init`, e.g. `torch.cuda.Stream()`,
    # `torch.cuda.CUDAGraph()`: torch.AcceleratorError "CUDA error: CUDA driver version is
    # insufficient for CUDA runtime version" (CUDA wheel, no driver) / "no CUDA-capable device".
    _message(
        "CUDA",
        (RuntimeError,),
        r"CUDA error: (CUDA driver version is insufficient|no CUDA-capable device)",
    ),
    # An NCCL process group constructed directly (not through init_process_group/new_group).
    _message("CUDA", (RuntimeError,), "ProcessGroupNCCL is only supported with GPUs"),
    # A Triton kernel launched with no GPU backend (triton/runtime/driver.py `_create_driver`):
    # "0 active drivers ([]). There should only be one."
    _message("CUDA", (RuntimeError,), r"0 active drivers \(\[\]\)"),
    # `import transformer_engine`, `import apex`, ... (CUDA_ONLY_PACKAGES).
    _import_of_cuda_only_package,
    # megatron-core's own "TE missing" errors: "Transformer Engine is not installed"
    # (extensions/transformer_engine.py), "apply_rope_fusion is not available. Please install
    # TE >= 1.4." (transformer_config.py:2251), "Only TE >= 2.3.0 supports ...",
    # "_make_fused_ops requires Transformer Engine.", "--transformer-impl=inference_optimized
    # requires transformer engine" (tensor_parallel/inference_layers.py).
    _message(
        "transformer_engine",
        _ERRORS,
        r"(?i)transformer ?engine is (not installed|required)|install (te|transformer[-_]engine)\b"
        r"|(only|requires?) te >= |requires? transformer[-_ ]?engine",
    ),
    # tensor_parallel/layers.py (ColumnParallelLinear): gradient_accumulation_fusion needs
    # Apex's fused_weight_gradient_mlp_cuda extension.
    _message("apex", (RuntimeError,), "custom CUDA extension fused_weight_gradient_mlp_cuda"),
    # Calling a placeholder that a module set to None because the import failed.
    _called_placeholder("HAVE_TE", "transformer_engine"),
    _called_placeholder("HAVE_APEX", "apex"),
    _called_placeholder("HAVE_MAMBA_SSM", "mamba_ssm"),
    _called_placeholder("HAVE_FLA", "fla"),
    # parallel_state.initialize_model_parallel with a layout larger than the world size
    # (parallel_state.py:823/883: TP*PP*CP, EP*ETP*PP; :925/1449: distributed-optimizer
    # instances): Megatron-LM's CI runs the unit tests under torchrun on 8 GPUs, one rank each.
    _message(
        "more ranks",
        (RuntimeError, AssertionError),
        r"world_size \(\d+\) is not divisible by"
        r"|[Dd]ata parallel size should be divisible by partial DistOpt shard factor",
    ),
)


def _first_line(exc: BaseException) -> str:
    """The first non-empty line of the exception's message (its type name if it has none)."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def hardware_cause(exc: BaseException | None) -> str | None:
    """ "<what> (<first line>)" when `exc`, or an exception it was raised from, only says that
    CUDA (or a CUDA-only package, or GPUs) is missing; None for any other failure."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        for cause in CAUSES:
            needs = cause(exc)
            if needs is not None:
                return f"{needs} ({_first_line(exc)})"
        exc = exc.__cause__
    return None
