"""Tripwire of patches/NeMo-RL/offload-guard-policy-workers.patch.

NeMo-RL's real worker classes (`DTensorPolicyWorkerImpl`, `DTensorPolicyWorkerV2Impl`,
`MegatronPolicyWorkerImpl`) are imported from 3rdparty/NeMo-RL with only their heavy
third-party imports stubbed (heavy_import_stubs.py says which and why). Workers are built
the way NeMo-RL's own unit tests build them: `object.__new__` plus the state the methods
read. The real `offload_after_refit()` (and, where a worker has it, `finish_inference()`)
puts a worker in the offloaded state; then each guarded entry point must raise
`RuntimeError` naming itself and the prepare step, and after each real prepare step the
guard must pass.

Device moves are the only thing replaced: the worker's own `move_*` helpers become
identity functions on the instance and `Tensor.cuda` returns the tensor (the workers call
`torch.randn(1).cuda()` to wake the allocator), because this machine has no GPU.

Unpatched, nothing stops the call: it runs into the method body and fails with an
unrelated error (or, on a GPU, the opaque CUDA illegal memory access of issue #1141).
"""

from __future__ import annotations

import ast
import asyncio
import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

from tests.patches.nemo_rl.heavy_import_stubs import stubbed_imports

pytestmark = pytest.mark.nemo_rl

WORKER_MODULES = {
    "dtensor": ("nemo_rl.models.policy.workers.dtensor_policy_worker", "DTensorPolicyWorkerImpl"),
    "dtensor_v2": (
        "nemo_rl.models.policy.workers.dtensor_policy_worker_v2",
        "DTensorPolicyWorkerV2Impl",
    ),
    "megatron": (
        "nemo_rl.models.policy.workers.megatron_policy_worker",
        "MegatronPolicyWorkerImpl",
    ),
}

# The value workers subclass AbstractPolicyWorker too (and so inherit its guarded
# get_reference_policy_logprobs); their __init__ must set the flag as well, or that
# guard raises AttributeError instead of its message.
VALUE_WORKER_MODULES = {
    "dtensor_value_v2": (
        "nemo_rl.models.value.workers.dtensor_value_worker_v2",
        "DTensorValueWorkerV2Impl",
    ),
    "megatron_value": (
        "nemo_rl.models.value.workers.megatron_value_worker",
        "MegatronValueWorkerImpl",
    ),
}


def _first_yield(agen: Any) -> Any:
    """Run an async generator up to its first item (where its body, and the guard, run)."""
    return asyncio.run(agen.__anext__())


TRAIN = "prepare_for_training"
LP = "prepare_for_lp_inference"
GEN = "prepare_for_generation"

# Guarded entry point -> (call with dummy arguments, the step the error must name).
# The guard is the first statement, so the arguments are never read when it fires.
ENTRIES: dict[str, tuple[Callable[[Any], Any], str]] = {
    "train": (lambda w: w.train(None, None), TRAIN),
    "get_logprobs": (lambda w: w.get_logprobs(data=None), LP),
    "get_reference_policy_logprobs": (lambda w: w.get_reference_policy_logprobs(data=None), LP),
    "score": (lambda w: w.score(None), LP),
    "get_topk_logits": (lambda w: w.get_topk_logits(data=None, k=1), LP),
    "get_full_logits_ipc": (lambda w: w.get_full_logits_ipc(None), LP),
    "begin_train_step": (lambda w: w.begin_train_step(None), TRAIN),
    "train_microbatch": (lambda w: w.train_microbatch(None), TRAIN),
    "finish_train_step": (lambda w: w.finish_train_step(), TRAIN),
    "generate": (lambda w: w.generate(data=None), GEN),
    # The streaming path MegatronGeneration.generate_async drives on each worker.
    "generate_async": (lambda w: _first_yield(w.generate_async(None)), GEN),
}

GUARDED: dict[str, list[str]] = {
    "dtensor": [
        "train",
        "get_logprobs",
        "get_reference_policy_logprobs",
        "score",
        "get_topk_logits",
    ],
    "dtensor_v2": [
        "train",
        "get_logprobs",
        "get_reference_policy_logprobs",
        "score",
        "get_topk_logits",
        "get_full_logits_ipc",
    ],
    "megatron": [
        "train",
        "get_logprobs",
        "get_reference_policy_logprobs",
        "get_topk_logits",
        "begin_train_step",
        "train_microbatch",
        "finish_train_step",
        "generate",
        "generate_async",
    ],
}

# Prepare steps that put the weights back, per worker (keyword arguments included).
PREPARE_STEPS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "dtensor": [(TRAIN, {}), (LP, {}), (LP, {"keep_train_buffers": True})],
    "dtensor_v2": [(TRAIN, {}), (LP, {}), (LP, {"keep_train_buffers": True})],
    "megatron": [(TRAIN, {}), (LP, {}), (LP, {"keep_train_buffers": True}), (GEN, {})],
}


def _identity_model(model: Any, *args: Any, **kwargs: Any) -> Any:
    return model


@pytest.fixture(scope="module")
def worker_modules(nemo_rl_on_path: Path) -> dict[str, ModuleType]:
    """The real policy and value worker modules, imported once with heavy deps stubbed."""
    modules = {}
    with stubbed_imports():
        for kind, (module_name, _cls) in {**WORKER_MODULES, **VALUE_WORKER_MODULES}.items():
            modules[kind] = importlib.import_module(module_name)
    return modules


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`Tensor.cuda` returns the CPU tensor (the workers' allocator wake-up call)."""
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    yield


def _bare_worker(kind: str, modules: dict[str, ModuleType], monkeypatch: pytest.MonkeyPatch):
    """A worker as NeMo-RL's unit tests build one: object.__new__ + the state read."""
    module = modules[kind]
    cls = getattr(module, WORKER_MODULES[kind][1])
    worker = object.__new__(cls)
    model = torch.nn.Linear(2, 2)
    worker.model = model
    worker.optimizer = None
    worker.offload_optimizer_for_logprob = False
    worker.timer = SimpleNamespace(start=lambda *_: None, stop=lambda *_: None)
    # What each worker's __init__ sets (the patched __init__ adds this one).
    worker._weights_offloaded = False
    if kind in ("dtensor", "dtensor_v2"):
        worker.cpu_offload = False
        worker.move_to_cpu = _identity_model
        worker.move_to_cuda = _identity_model
        worker.move_buffer_to_device = _identity_model
    else:
        worker.rank = 0
        worker.move_model = _identity_model
        worker.finalize_async_save = lambda: None
        worker.optimizer_cpu_offload = False
        worker.offload_optimizer_for_refit = False
        worker.fp8_cfg = None
        worker.cfg = {
            "megatron_cfg": {"empty_unused_memory_level": 0},
            "generation": {"mcore_generation_config": {"cuda_graph_impl": "none"}},
        }
        # prepare_for_generation / generate on a colocated worker without a
        # dedicated inference model (generation runs on the training model).
        model.__dict__["config"] = SimpleNamespace(flash_decode=True)
        worker.inference_model = None
        worker._colocated_reshard_plan = None
        worker.is_generation_colocated = True
        worker.should_disable_forward_pre_hook = False
        worker._inference_engine_initialized = True
        worker._inference_engine_asleep = True
        worker._wake = lambda: None
        gen_module = importlib.import_module("nemo_rl.models.generation.megatron.megatron_worker")
        monkeypatch.setattr(gen_module, "log_gpu_memory", lambda *_: None)
        monkeypatch.setattr(gen_module, "unwrap_model", lambda m: m)
    return worker


CASES = [(kind, entry) for kind, entries in GUARDED.items() for entry in entries]


@pytest.mark.parametrize(("kind", "entry"), CASES, ids=[f"{k}-{e}" for k, e in CASES])
def test_offloaded_entry_raises_naming_prepare_step(
    kind: str,
    entry: str,
    worker_modules: dict[str, ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    no_gpu: None,
) -> None:
    worker = _bare_worker(kind, worker_modules, monkeypatch)
    worker.offload_after_refit()
    _assert_guard_stops(worker, entry)


def _assert_guard_stops(worker: Any, entry: str) -> None:
    """`entry` on an offloaded worker raises, naming itself, both offloads and its step."""
    call, step = ENTRIES[entry]
    with torch.enable_grad(), pytest.raises(RuntimeError) as excinfo:
        call(worker)
    message = str(excinfo.value)
    assert f"{entry}() was called while the policy weights are offloaded" in message, message
    assert "(by offload_after_refit() or finish_inference())" in message, message
    assert f"Call {step}() before {entry}()" in message, message


# finish_inference() (PPO) offloads the parameters as well; the workers that have it.
FINISH_CASES = [(kind, entry) for kind in ("dtensor_v2", "megatron") for entry in GUARDED[kind]]


@pytest.mark.parametrize(("kind", "entry"), FINISH_CASES, ids=[f"{k}-{e}" for k, e in FINISH_CASES])
def test_finish_inference_offloads_too(
    kind: str,
    entry: str,
    worker_modules: dict[str, ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    no_gpu: None,
) -> None:
    worker = _bare_worker(kind, worker_modules, monkeypatch)
    worker.finish_inference()
    _assert_guard_stops(worker, entry)


PREP_CASES = [
    (kind, step, kwargs, entry)
    for kind, steps in PREPARE_STEPS.items()
    for step, kwargs in steps
    for entry in GUARDED[kind]
]


@pytest.mark.parametrize(
    ("kind", "step", "kwargs", "entry"),
    PREP_CASES,
    ids=[f"{k}-{s}{'-keep' if kw else ''}-{e}" for k, s, kw, e in PREP_CASES],
)
def test_prepare_step_clears_guard(
    kind: str,
    step: str,
    kwargs: dict[str, Any],
    entry: str,
    worker_modules: dict[str, ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    no_gpu: None,
) -> None:
    worker = _bare_worker(kind, worker_modules, monkeypatch)
    worker.offload_after_refit()
    getattr(worker, step)(**kwargs)
    assert worker._weights_offloaded is False
    worker._assert_weights_on_device(entry)  # must not raise


FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def _method_defs(path: Path, class_names: set[str]) -> dict[tuple[str, str], FunctionNode]:
    tree = ast.parse(path.read_text())
    return {
        (node.name, fn.name): fn
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name in class_names
        for fn in node.body
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def _is_guard_call(stmt: ast.stmt, entry: str) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Attribute)
        and stmt.value.func.attr == "_assert_weights_on_device"
        and [getattr(a, "value", None) for a in stmt.value.args] == [entry]
    )


def _first_statement(fn: FunctionNode) -> ast.stmt:
    body = fn.body
    docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    return body[1] if docstring else body[0]


@pytest.mark.parametrize(("kind", "entry"), CASES, ids=[f"{k}-{e}" for k, e in CASES])
def test_guard_is_first_statement(
    kind: str, entry: str, worker_modules: dict[str, ModuleType]
) -> None:
    cls = getattr(worker_modules[kind], WORKER_MODULES[kind][1])
    owner = next(klass for klass in cls.__mro__ if entry in vars(klass))
    path = Path(importlib.import_module(owner.__module__).__file__ or "")
    fn = _method_defs(path, {owner.__name__})[(owner.__name__, entry)]
    first = _first_statement(fn)
    if entry in ("generate", "generate_async"):
        # Guarded only when generation runs on the training model.
        assert isinstance(first, ast.If), f"{owner.__name__}.{entry}: first statement not the guard"
        first = first.body[0]
    assert _is_guard_call(first, entry), (
        f"{path.name}:{first.lineno}: {owner.__name__}.{entry} does not start with "
        f'self._assert_weights_on_device("{entry}")'
    )


@pytest.mark.parametrize("kind", [*WORKER_MODULES, *VALUE_WORKER_MODULES])
def test_flag_initialised_in_init(kind: str, worker_modules: dict[str, ModuleType]) -> None:
    cls_name = {**WORKER_MODULES, **VALUE_WORKER_MODULES}[kind][1]
    path = Path(worker_modules[kind].__file__ or "")
    init = _method_defs(path, {cls_name})[(cls_name, "__init__")]
    assigned = [
        node
        for node in ast.walk(init)
        if isinstance(node, ast.Assign)
        and any(
            isinstance(t, ast.Attribute) and t.attr == "_weights_offloaded" for t in node.targets
        )
    ]
    assert assigned, f"{path.name}: {cls_name}.__init__ never sets self._weights_offloaded"
