"""Tripwire for patches/Megatron-Bridge/retired/setup-disable-jit-fuser-import.patch.

Retired as not-needed by the rebase onto Bridge v0.6.0: from v0.6.0 on, setup.py imports
Megatron-LM's `megatron.training`, whose `global_vars.py` imports `disable_jit_fuser`
unconditionally, so guarding Bridge's own import can no longer make setup importable on an old
megatron-core. On such a Bridge tree the two tripwires are strict xfails that record exactly
that (they fail with and without the patch); on Bridge <= 0.5 they are tripwires as before.

Bridge 0.2.x/0.3.x admit megatron-core releases older than 0.16.0, whose `megatron.core.jit`
has no `disable_jit_fuser`; `megatron.bridge.training.setup` imported it unconditionally, so
the module failed to import there. With the patch it imports, and only asking for the fuser
disable (`dist.disable_jit_fuser=True`) fails, with an error naming the version needed.

How the import is exercised on a CPU machine without Bridge's dependency set:
- `setup.py` is executed from the checkout (or the release stand-in, same path) by file
  location; Bridge is not installed.
- Its `megatron.core.*` imports are real: they are what the patch is about.
- Every other `megatron.bridge.*` module it imports is an explicit stub served by
  `_BridgeStubFinder` (names resolve to permissive placeholder classes). The real ones pull in
  transformer_engine (unguarded `import transformer_engine.pytorch` in bridge/peft), nvidia
  modelopt, datasets, tensorboard, omegaconf, ..., which cannot all be installed on a CPU
  machine and have no bearing on the `megatron.core.jit` import.
- "megatron-core < 0.16.0" is simulated exactly where it differs: `megatron.core.jit` is
  replaced, for the test only, by a copy of the real module without `disable_jit_fuser`.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.upstream_tree import upstream_tree

SETUP_PY = upstream_tree("Megatron-Bridge") / "src/megatron/bridge/training/setup.py"
SETUP_MODULE = "megatron.bridge.training.setup"

pytestmark = pytest.mark.skipif(
    not SETUP_PY.is_file(),
    reason=f"{SETUP_PY} is absent: run tools/apply_patches.sh to provide Megatron-Bridge",
)
NEEDS_MEGATRON_TRAINING = SETUP_PY.is_file() and "from megatron.training" in SETUP_PY.read_text()
retired_on_this_bridge = pytest.mark.xfail(
    NEEDS_MEGATRON_TRAINING,
    strict=True,
    raises=ImportError,
    reason="Bridge >= 0.6.0 setup.py imports megatron.training, which imports "
    "megatron.core.jit.disable_jit_fuser unconditionally: the patch was retired as not-needed",
)


class _StubMeta(type):
    """Metaclass of placeholder classes: any attribute is another placeholder."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__qualname__}.{name}", cls.__module__)


def _placeholder(name: str, module: str) -> type:
    """A class that accepts any constructor arguments and whose instances accept any call."""

    def __init__(self: object, *args: object, **kwargs: object) -> None:
        pass

    def __call__(self: object, *args: object, **kwargs: object) -> None:
        return None

    return _StubMeta(
        name.rsplit(".", 1)[-1],
        (),
        {"__init__": __init__, "__call__": __call__, "__module__": module, "__qualname__": name},
    )


class _StubModule(types.ModuleType):
    """A Bridge module stand-in: every public name is a placeholder class."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _placeholder(name, self.__name__)
        setattr(self, name, value)
        return value


class _BridgeStubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves `megatron.bridge` and its submodules (except setup.py itself) as stubs."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == SETUP_MODULE:
            return None
        if fullname == "megatron.bridge" or fullname.startswith("megatron.bridge."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


@pytest.fixture
def bridge_stubs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Install the Bridge stub finder; drop every megatron.bridge module afterwards. A real
    Bridge an earlier test imported in this process is set aside for the test and put back."""
    import megatron
    import megatron.core

    for name in [k for k in sys.modules if k == "megatron.bridge" or k.startswith("megatron.")]:
        if name == "megatron.bridge" or name.startswith("megatron.bridge."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(megatron, "bridge", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_BridgeStubFinder(), *sys.meta_path])
    yield
    for name in [
        k for k in sys.modules if k == "megatron.bridge" or k.startswith("megatron.bridge.")
    ]:
        del sys.modules[name]


@pytest.fixture
def core_jit_without_disable(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """`megatron.core.jit` as megatron-core < 0.16.0 has it: no `disable_jit_fuser`."""
    import megatron.core
    import megatron.core.jit as real_jit

    old = types.ModuleType(real_jit.__name__, real_jit.__doc__)
    old.__dict__.update(
        {k: v for k, v in vars(real_jit).items() if k not in {"disable_jit_fuser", "__dict__"}}
    )
    assert not hasattr(old, "disable_jit_fuser")
    monkeypatch.setitem(sys.modules, "megatron.core.jit", old)
    monkeypatch.setattr(megatron.core, "jit", old, raising=False)
    return old


def _load_setup(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(SETUP_MODULE, SETUP_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, SETUP_MODULE, module)
    spec.loader.exec_module(module)
    return module


def _state_requesting_fuser_disable() -> types.SimpleNamespace:
    dist = types.SimpleNamespace(disable_jit_fuser=True, enable_megatron_core_experimental=False)
    return types.SimpleNamespace(cfg=types.SimpleNamespace(dist=dist))


@retired_on_this_bridge
@pytest.mark.usefixtures("bridge_stubs", "core_jit_without_disable")
def test_setup_imports_without_disable_jit_fuser(monkeypatch: pytest.MonkeyPatch) -> None:
    setup = _load_setup(monkeypatch)
    assert callable(setup.setup)


@retired_on_this_bridge
@pytest.mark.usefixtures("bridge_stubs", "core_jit_without_disable")
def test_requesting_disable_jit_fuser_raises_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    setup = _load_setup(monkeypatch)
    with pytest.raises(RuntimeError, match=r"megatron-core\s+>= 0\.16\.0") as info:
        setup.setup(_state_requesting_fuser_disable(), lambda *args: (None, None, None))
    message = str(info.value)
    assert "disable_jit_fuser" in message
    from megatron.core import package_info

    assert package_info.__version__ in message


@pytest.mark.usefixtures("bridge_stubs")
def test_setup_uses_core_disable_jit_fuser_when_present(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression guard: on megatron-core >= 0.16.0 the real function is used."""
    import megatron.core.jit

    if NEEDS_MEGATRON_TRAINING and importlib.util.find_spec("megatron.training") is None:
        pytest.skip(
            "this Bridge's setup.py imports megatron.training (Megatron-LM's training package), "
            "which the megatron-core release stand-in does not contain"
        )
    setup = _load_setup(monkeypatch)
    assert setup.disable_jit_fuser is megatron.core.jit.disable_jit_fuser
