"""pytest plugin: run an upstream's OWN test suite (Megatron-LM, Megatron-Bridge, NeMo-RL) on a
machine without CUDA.

    cd <upstream tree> && python -m pytest -p upstream_pytest.cpu tests/unit_tests/...

The upstream suites are written for GPU CI: Megatron-LM's `Utils.initialize_distributed`
(tests/unit_tests/test_utilities.py) calls `torch.cuda.set_device(rank %
torch.cuda.device_count())` and `init_process_group(backend='nccl')`, and megatron-core itself
asks `torch.cuda.current_device()` for buffers. This plugin maps exactly those onto the CPU, as
`mcore_grpo.worker.cpu` does for the worker (whose redirects it reuses; each names the upstream
line that needs it), and turns the failures that only say "this needs a GPU / a CUDA-only
package" into skips with that reason, so a CPU run separates what runs on CPU from what cannot.

Where CUDA is available the plugin does nothing (it says so in the report header).
"""

from __future__ import annotations

import functools
import inspect
import os
import socket
import sys
from collections.abc import Callable, Generator
from typing import Any, SupportsInt

import pytest
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from mcore_grpo.worker.cpu import CudaToCpuMode, _install, _is_cuda_device, _uninstall

from upstream_pytest.cpu_causes import hardware_cause

PREFIX = "upstream-cpu"

# (owner, attribute) -> the original, for everything this plugin replaced.
_SAVED: dict[tuple[Any, str], Any] = {}
_STATE: dict[str, bool] = {"cuda": False, "installed": False}

# Stands in for the CUDA default generator's state (see `_cuda_get_rng_state`); CPU tensors
# keep drawing from torch's CPU generator.
_CUDA_RNG = torch.Generator()


def _cpu_backend(backend: object) -> object:
    """The backend with NCCL replaced by gloo: "nccl" -> "gloo", "cpu:gloo,cuda:nccl" ->
    "cpu:gloo". Anything else is returned as it is."""
    if not isinstance(backend, str):
        return backend
    if ":" not in backend:
        return "gloo" if backend.lower() == "nccl" else backend
    kept = [p for p in backend.split(",") if p.split(":", 1)[-1].strip().lower() != "nccl"]
    return ",".join(kept) or "gloo"


def _with_cpu_backend(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap `init_process_group` / `new_group` to use gloo where NCCL is asked for (by keyword
    or position), and drop a CUDA `device_id` (gloo binds no device).

    Needed by Megatron-LM tests/unit_tests/test_utilities.py:78 (`init_process_group(
    backend='nccl', ...)` in `Utils.initialize_distributed`), tests that create NCCL groups
    themselves (`new_group(..., backend="nccl")`, `HyperCommGrid(..., backend="nccl")`, which
    reaches `new_group` through `new_subgroups_by_enumeration`).
    """

    position = list(inspect.signature(original).parameters).index("backend")

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if len(args) > position:
            args = (*args[:position], _cpu_backend(args[position]), *args[position + 1 :])
        if "backend" in kwargs:
            kwargs["backend"] = _cpu_backend(kwargs["backend"])
        if _is_cuda_device(kwargs.get("device_id")):
            del kwargs["device_id"]
        return original(*args, **kwargs)

    return wrapper


def _set_device(device: object) -> None:
    """Replacement for `torch.cuda.set_device`: there is no device to select.

    Needed by Megatron-LM tests/unit_tests/test_utilities.py:62 (`Utils.initialize_distributed`).
    """


def _device_count() -> int:
    """Replacement for `torch.cuda.device_count`: one (CPU) device instead of none.

    Needed by Megatron-LM tests/unit_tests/test_utilities.py:62 (`Utils.rank %
    torch.cuda.device_count()`, a ZeroDivisionError with 0) and :87 (`Utils.set_world_size`).
    """
    return 1


def _not_available() -> bool:
    """Replacement for `torch.cuda.is_available`: still False. With
    PYTORCH_NVML_BASED_CUDA_CHECK=1 torch answers it from `device_count()`, now 1."""
    return False


def _cuda_get_rng_state(device: object = "cuda") -> torch.Tensor:
    """Replacement for `torch.cuda.get_rng_state`: the state of a CPU stand-in generator.

    Needed by Megatron-LM megatron/core/tensor_parallel/random.py:303/306
    (`CudaRNGStatesTracker.add`, reached from `model_parallel_cuda_manual_seed`, which most
    unit tests call in setup, and from megatron/training/initialize.py:447 `_set_random_seed`
    once `device_count()` is 1) and :118 (`_get_cuda_rng_state` in `fork()`). The tracker only
    stores and restores these states; its restore (`_set_cuda_rng_state`) is queued by torch's
    `_lazy_call` until CUDA initialises, which never happens here.
    """
    return _CUDA_RNG.get_state()


def _cuda_set_rng_state(new_state: torch.Tensor, device: object = "cuda") -> None:
    """Replacement for `torch.cuda.set_rng_state` (the stand-in of `_cuda_get_rng_state`)."""
    _CUDA_RNG.set_state(new_state)


def _cuda_manual_seed(seed: SupportsInt) -> None:
    """Replacement for `torch.cuda.manual_seed`: seeds the stand-in generator, so states taken
    after different seeds differ (random.py:305 in `CudaRNGStatesTracker.add`)."""
    _CUDA_RNG.manual_seed(int(seed))


def _free_port() -> str:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _replacements() -> list[tuple[Any, str, Any]]:
    """Every (owner, attribute, replacement) the plugin installs besides worker/cpu.py's."""
    cuda_random = torch.cuda.random
    out: list[tuple[Any, str, Any]] = [
        (torch.cuda, "set_device", _set_device),
        (torch.cuda, "device_count", _device_count),
        (torch.cuda, "is_available", _not_available),
        (torch.cuda, "get_rng_state", _cuda_get_rng_state),
        (cuda_random, "get_rng_state", _cuda_get_rng_state),
        (torch.cuda, "set_rng_state", _cuda_set_rng_state),
        (cuda_random, "set_rng_state", _cuda_set_rng_state),
        (torch.cuda, "manual_seed", _cuda_manual_seed),
        (cuda_random, "manual_seed", _cuda_manual_seed),
    ]
    # torch.distributed re-exports distributed_c10d's functions; torch's own callers (e.g.
    # new_subgroups_by_enumeration -> new_group) look them up in distributed_c10d.
    for name in ("init_process_group", "new_group"):
        wrapped = _with_cpu_backend(getattr(c10d, name))
        out += [(dist, name, wrapped), (c10d, name, wrapped)]
    return out


def hub_offline() -> None:
    """Put the Hugging Face Hub in offline mode, unless HF_HUB_OFFLINE is set already.

    These machines (and CI) reach no network. Online, a test that downloads from the Hub
    (NeMo-RL's test_megatron_generation.py `tokenizer` fixture, for one) sat in
    huggingface_hub's retry backoff for 17+ minutes, past the test timeout, and hung the whole
    run. Offline it fails at once with huggingface_hub's own error, before and after a series
    alike. The constant is set too: a process that preloads huggingface_hub (verify's fork
    server) has read the variable already.
    """
    if os.environ.get("HF_HUB_OFFLINE") is not None:
        return
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        setattr(constants, "HF_HUB_OFFLINE", True)  # noqa: B010 (a module global)


def install() -> None:
    """Install the redirects (idempotent); nothing where CUDA is available. The Hub goes
    offline either way (`hub_offline`)."""
    hub_offline()
    if _STATE["installed"]:
        return
    _STATE["cuda"] = torch.cuda.is_available()
    if _STATE["cuda"]:
        return
    for owner, name, replacement in _replacements():
        _SAVED[(owner, name)] = getattr(owner, name)
        setattr(owner, name, replacement)
    _install()  # worker/cpu.py: current_device, current/default_stream, synchronize, empty_cache
    # Utils.initialize_distributed (test_utilities.py:65) rendezvous at MASTER_PORT, default
    # 29500: two CPU runs on one machine would collide; a GPU CI job has the machine to itself.
    os.environ.setdefault("MASTER_PORT", _free_port())
    _STATE["installed"] = True


def uninstall() -> None:
    """Restore everything `install` replaced."""
    if not _STATE["installed"]:
        return
    _uninstall()
    for (owner, name), original in _SAVED.items():
        setattr(owner, name, original)
    _SAVED.clear()
    _STATE["installed"] = False


def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Install before the upstream's conftest.py files import megatron & co."""
    install()


def pytest_configure(config: pytest.Config) -> None:
    """Install here too, for runs that register the plugin after the initial conftests."""
    install()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave torch as it was (matters when pytest runs in-process, e.g. pytester)."""
    uninstall()


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say whether the layer is active and what it maps, so a report is never misread."""
    if _STATE["cuda"]:
        return [f"{PREFIX}: CUDA is available; the CPU compatibility layer is off (no-op)"]
    return [
        f"{PREFIX}: no CUDA: CPU compatibility layer active (upstream_pytest.cpu):",
        "  init_process_group/new_group backend nccl -> gloo; torch.cuda.set_device no-op;",
        "  torch.cuda.device_count 0 -> 1 (is_available stays False); torch.cuda.current_device",
        "  -> cpu; current/default_stream -> no-op stream; synchronize/empty_cache no-op;",
        "  torch.cuda get/set_rng_state, manual_seed -> a CPU stand-in generator;",
        "  per test: device='cuda' / .cuda() / .to('cuda') -> cpu (CudaToCpuMode);",
        "  MASTER_PORT defaults to a free port;",
        f"  failures that need CUDA or a CUDA-only package -> skipped '{PREFIX}: needs ...'",
    ]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """CUDA device arguments map to the CPU during each test's setup, call and teardown."""
    if not _STATE["installed"]:
        return (yield)
    with CudaToCpuMode():
        return (yield)


def _release_groups() -> None:
    """Destroy every process group but the default one (megatron-core has just forgotten them)."""
    world = c10d.GroupMember.WORLD
    for group in list(c10d._world.pg_map):
        if group is not world and group is not None:
            dist.destroy_process_group(group)


def _releasing(destroy: Callable[..., Any]) -> Callable[..., Any]:
    """`parallel_state.destroy_model_parallel` that also destroys the groups it forgets.

    megatron-core's `destroy_model_parallel()` (each Megatron-LM test's teardown through
    `Utils.destroy_model_parallel`, and every re-`initialize_model_parallel`) drops its
    references to the groups but never destroys them. A NCCL group costs a GPU CI job little;
    a gloo group keeps its own threads, so a CPU run of a whole test directory piled up
    thousands of threads (7,155 in one process, load average > 3,000 on 2 cores).
    """

    @functools.wraps(destroy)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = destroy(*args, **kwargs)
        if dist.is_initialized():
            _release_groups()
        return result

    wrapper.__wrapped_by_upstream_cpu__ = True  # type: ignore[attr-defined]
    return wrapper


def _wrap_parallel_state() -> None:
    """Wrap megatron-core's `destroy_model_parallel` once megatron-core is imported."""
    ps = sys.modules.get("megatron.core.parallel_state")
    destroy = getattr(ps, "destroy_model_parallel", None)
    if destroy is None or getattr(destroy, "__wrapped_by_upstream_cpu__", False):
        return
    _SAVED[(ps, "destroy_model_parallel")] = destroy
    ps.destroy_model_parallel = _releasing(destroy)  # type: ignore[union-attr]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    """Before each test (its module has imported megatron-core by now), wrap the teardown of
    megatron-core's parallel state (`_releasing`)."""
    if _STATE["installed"]:
        _wrap_parallel_state()
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A setup/call failure that only says CUDA or a CUDA-only package is missing becomes a
    skip with that reason; every other failure stays a failure. Outermost (tryfirst), so it
    sees the report after xfail handling."""
    report = yield
    if not _STATE["installed"] or not report.failed or report.when not in ("setup", "call"):
        return report
    if call.excinfo is None:
        return report
    cause = hardware_cause(call.excinfo.value)
    if cause is None:
        return report
    path, lineno, _ = item.reportinfo()
    report.outcome = "skipped"
    report.longrepr = (str(path), (lineno or 0) + 1, f"Skipped: {PREFIX}: needs {cause}")
    return report


def _line_in(path: str, exc: BaseException) -> int:
    """The line of `path` (the test module) in `exc`'s traceback, e.g. its failing import."""
    lineno = 0
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == path:
            lineno = tb.tb_lineno
        tb = tb.tb_next
    return lineno


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """A test module whose import fails only for want of CUDA or a CUDA-only package (e.g. a
    top-level `import transformer_engine`) is skipped with that reason, rather than stopping
    the session as a collection error.

    The import is tried here first: a Module caches what it imported, so a module that imports
    is imported once; one that fails (pytest raises a CollectError from the original exception;
    a module-level skip raises Skipped) is tried again by pytest's own collection.
    """
    skip: tuple[str, int] | None = None
    if _STATE["installed"] and isinstance(collector, pytest.Module):
        try:
            _ = collector.obj  # imports the module
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # whatever it is, pytest meets it again when it collects
            original = e.__cause__ or e
            reason = hardware_cause(original)
            if reason is not None:
                skip = (reason, _line_in(str(collector.path), original))
    report = yield
    if skip is not None and report.failed:
        report.outcome = "skipped"
        report.longrepr = (str(collector.path), skip[1], f"Skipped: {PREFIX}: needs {skip[0]}")
    return report
