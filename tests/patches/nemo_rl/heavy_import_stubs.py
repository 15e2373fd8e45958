"""Import NeMo-RL's real worker modules on a CPU machine with their heavy deps stubbed.

Why stubs instead of the real dependency set (see README.md here for the long form):
NeMo-RL main needs Python 3.13, torch 2.11 from a CUDA index, Transformer Engine built from
source (~17 min here), Megatron-Bridge and a Megatron-LM commit no release matches. None of
that code runs on the paths under test (flag bookkeeping in `offload_after_refit` /
`prepare_for_*` and the guard at the top of each GPU-bound entry), so those packages are
replaced by permissive stand-ins while NeMo-RL's own modules, torch and transformers stay real.

The stubs exist only inside `stubbed_imports()`: real modules with the same names (the
installed megatron.core, used by other tests in this process) are taken out of `sys.modules`
for the duration and put back afterwards, so nothing leaks into other tests.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

# Top-level packages replaced by stubs, each with the reason it cannot be real here.
STUBBED_PACKAGES: dict[str, str] = {
    # Heavy or unbuildable here.
    "megatron": (
        "Megatron-Bridge imports transformer_engine unguarded (source-only, ~17 min build) and "
        "NeMo-RL main imports FullyShardedDataParallelV1/V2, which no megatron-core release "
        "has; stubbing the whole namespace also keeps the installed megatron.core unshadowed"
    ),
    "nemo_automodel": "DTensor v2 model construction; needs triton 3.8 and nemo-automodel 0.4",
    "torch_memory_saver": "CUDA virtual-memory offload used by the Megatron worker; CUDA-only",
    "transformers": (
        "NeMo-RL asserts transformers < 5.12 on import (nemo_rl/models/policy/__init__.py) "
        "and then patches AutoTokenizer.from_pretrained process-wide: stubbed so that patch never "
        "leaks into the test process (the `nemo-rl` group installs 5.8.1)"
    ),
    "torch.utils.tensorboard": "needs the tensorboard package (logger import only)",
    # Imported at module level by NeMo-RL, unused on the offload/prepare paths under test;
    # stubbed so these tripwires import only what their paths run (the `nemo-rl` dependency
    # group installs the real packages for the NeMo-RL driver, tests/integration/nemo_rl_driver).
    "accelerate": "init_empty_weights for model construction; no model is built",
    "datasets": "HF datasets (data loading)",
    "fastapi": "HTTP refit server",
    "hydra": "get_class for config-driven classes",
    "mlflow": "experiment logging",
    "prometheus_client": "metrics export",
    "pynvml": "NVML memory diagnostics; no GPU here",
    "swanlab": "experiment logging",
    "tensordict": "transfer-queue data plane",
    "uvicorn": "HTTP refit server",
    "wandb": "experiment logging",
    "zmq": "IPC refit sockets (pyzmq)",
}


# Names a stub module must NOT provide, mirroring the versions NeMo-RL pins (NeMo-RL checks
# for them with try/except ImportError and refuses to import when they are present).
ABSENT_NAMES: dict[str, frozenset[str]] = {
    # nemo_rl/models/automodel/setup.py backports this class and raises RuntimeError
    # ("remove the local backport shim") if Automodel already exports it.
    "nemo_automodel": frozenset({"NeMoAutoModelForTokenClassification"}),
}


class _StubMeta(type):
    """Metaclass so a stub *class* answers any attribute, subscript or `|` with a stub."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _make_stub_class(f"{cls.__qualname__}.{name}")

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls

    def __repr__(cls) -> str:
        return f"<stub {cls.__qualname__}>"


class _Stub(metaclass=_StubMeta):
    """Instance of a stub: accepts any construction, answers any attribute.

    Called with one callable and nothing else it returns that callable, so a stub used as a
    decorator (`@ray.remote`, `@some_stub(...)`) leaves the decorated NeMo-RL code intact.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._stub_args = args

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _Stub()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Stub()

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __enter__(self) -> _Stub:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _make_stub_class(qualname: str) -> type:
    name = qualname.rsplit(".", 1)[-1]
    cls = _StubMeta(name, (_Stub,), {"__module__": "stub", "__qualname__": qualname})
    return cls


class _StubModule(types.ModuleType):
    """A stub module: every attribute is a stub class, every submodule a stub module."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["__path__"] = []  # a package, so submodule imports resolve here too
        self.__stub__ = True
        # Version gates on import (`Version(transformers.__version__) < ...`) compare low.
        self.__version__ = "0+stub"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if name in ABSENT_NAMES.get(self.__name__, frozenset()):
            raise AttributeError(f"stub module {self.__name__} deliberately lacks {name}")
        value = _make_stub_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _StubFinder(importlib.abc.MetaPathFinder):
    def __init__(self, packages: Sequence[str]) -> None:
        self.packages = frozenset(packages)
        self.loader = _StubLoader()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not _owned(fullname, self.packages) or _absent(fullname):
            return None
        return importlib.machinery.ModuleSpec(fullname, self.loader, is_package=True)


def _absent(fullname: str) -> bool:
    """`from pkg import Name` falls back to importing `pkg.Name`: refuse absent names there too."""
    parent, _, leaf = fullname.rpartition(".")
    return leaf in ABSENT_NAMES.get(parent, frozenset())


def _owned(name: str, packages: frozenset[str]) -> bool:
    """True when `name` is one of `packages` (dotted prefixes allowed) or inside one."""
    return any(name == p or name.startswith(p + ".") for p in packages)


@contextmanager
def stubbed_imports(packages: Sequence[str] | None = None) -> Iterator[list[str]]:
    """Within the block, imports of `packages` (default: STUBBED_PACKAGES) yield stubs.

    Yields the list of stub module names created, for diagnostics. On exit the stub modules
    are removed from `sys.modules` and any real modules they displaced are restored; modules
    imported meanwhile keep their references to the stubs.
    """
    chosen = frozenset(packages if packages is not None else STUBBED_PACKAGES)
    displaced = {name: mod for name, mod in sys.modules.items() if _owned(name, chosen)}
    for name in displaced:
        del sys.modules[name]
    finder = _StubFinder(sorted(chosen))
    sys.meta_path.insert(0, finder)
    created: list[str] = []
    try:
        yield created
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if _owned(n, chosen)]:
            if getattr(sys.modules[name], "__stub__", False):
                created.append(name)
            del sys.modules[name]
        sys.modules.update(displaced)
        # Importing `torch.utils.tensorboard` also set the stub as an attribute of the real
        # `torch.utils`: put the real submodule back there (or remove the attribute).
        for name in chosen:
            parent_name, _, leaf = name.rpartition(".")
            parent = sys.modules.get(parent_name) if parent_name else None
            if parent is None or not getattr(getattr(parent, leaf, None), "__stub__", False):
                continue
            if name in displaced:
                setattr(parent, leaf, displaced[name])
            else:
                delattr(parent, leaf)
