"""A pytest plugin: a test that leaves process-wide state changed fails, naming what it changed.

Why: the suite runs in random order (pytest-randomly), and a leak shows up in a later victim
(a fixture's `assert torch.distributed.is_initialized()`, a mirror setting seen by the wrong
test), far from its source. This plugin takes a snapshot of the process before each test's
setup and after its teardown and fails the test, at teardown, on any difference: the source
is named where it happens.

What is compared (`snapshot`): torch.distributed and megatron-core's parallel state, torch's
process-wide settings (default dtype and device, thread counts, deterministic flags, grad
mode, the torch-function mode stack that `with torch.device(...)` pushes), the environment
variables, the working directory, `sys.path`, the signal handlers, and the module-level
registries of tools/ and integration/ (`REGISTRIES`). Modules are only read when already
imported: the guard never imports torch or megatron-core into a test that did not.

Fixtures wider than a function (a session's process group, a module's worker) change state
on purpose, for the tests that share them: each such fixture's changes are measured at its
setup (`pytest_fixture_setup`) and are not counted against the test during which it was set
up or torn down. When the fixture is torn down, what it changed must be back as it found it,
or the test during whose teardown that happened fails, naming the fixture.

Loaded for every run by `-p tests.support.state_guard` in pyproject.toml's addopts.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import pytest

Snapshot = dict[str, object]

# Module-level state of this repository's code: module -> attributes (read as a value or, for
# a callable or an object, as an identity). A key of a module not yet imported is skipped.
# Not here, on purpose: memo caches keyed by what they read, where a hit is the answer a miss
# would give (`source.nested_plan._PLANS`, keyed by each checkout's file stats), and log-once
# sets (`worker.generation._LOGGED`).
REGISTRIES: dict[str, tuple[str, ...]] = {
    "tools.patchtool.source.mirror": ("_active",),
    "tools.patchtool.git.git": ("_SESSION_CONFIG",),
    "tools.patchtool.verify.pytest_run": ("_LIVE",),
    "mcore_grpo.worker.cpu": ("_DEPTH", "_SAVED"),
    "upstream_pytest.cpu": ("_STATE", "_SAVED"),
    "mcore_grpo.worker.generation": ("_SAMPLERS",),
    "mcore_grpo.grpo.cluster.local_ray": ("_SAVED",),
}
# Set by pytest itself around each phase; by torch on its first compile, to the same default
# every time (torch/_inductor/runtime/cache_dir_utils.py); and by torch's compiled-code loader,
# a pointer handed to each library it loads (torch/_inductor/codecache.py).
IGNORED_ENV = {
    "PYTEST_CURRENT_TEST",
    "TORCHINDUCTOR_CACHE_DIR",
    "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR",
}
# Entries that imports append for good and depend on afterwards (setuptools' vendored packages,
# imported by name once setuptools is): part of an import, never to be taken back.
IMPORT_PATHS = (os.path.join("setuptools", "_vendor"),)
# What importing a package does to the process for good, by its own code: excused in the test
# that imports it first (which one that is depends on the order), compared everywhere else.
IMPORT_EFFECTS: dict[str, tuple[str, ...]] = {
    # nemo_rl/__init__.py: Ray's switches, and Megatron-LM's path for its own imports.
    "nemo_rl": (
        "os.environ[RAY_USAGE_STATS_ENABLED]",
        "os.environ[RAY_ENABLE_UV_RUN_RUNTIME_ENV]",
        "sys.path",
    ),
    # ray/__init__.py: its vendored packages' path; ray/_private/client_mode_hook.py:
    # RAY_CLIENT_MODE; and the uv-run switch set just before ray's first import
    # (mcore_grpo.grpo.cluster.ray_import), read by that import only.
    "ray": (
        "os.environ[RAY_CLIENT_MODE]",
        "os.environ[RAY_ENABLE_UV_RUN_RUNTIME_ENV]",
        "sys.path",
    ),
    # sklearn/__init__.py: OpenMP's switches (setdefault), imported by transformers' extras.
    "sklearn": ("os.environ[KMP_DUPLICATE_LIB_OK]", "os.environ[KMP_INIT_AT_FORK]"),
}
# A key first seen after a test (its module imported by the test) is compared with this state,
# the one a fresh import has; a key of neither kind has nothing to be compared with.
PRISTINE: dict[str, object] = {
    "torch.distributed": "not initialized",
    "megatron.core.parallel_state": "not initialized",
}
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
UNSET = "<unset>"


def _value(obj: object) -> object:
    """A comparable reading: containers by their items, callables and objects by identity."""
    if isinstance(obj, bool | int | float | str | bytes | type(None)):
        return obj
    if isinstance(obj, dict):
        return {repr(k): _value(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_value(v) for v in obj]
    if isinstance(obj, set | frozenset):
        return sorted(repr(v) for v in obj)
    return f"<{type(obj).__name__} at {id(obj):#x}>"


def _torch(snap: Snapshot) -> None:
    torch = sys.modules.get("torch")
    if torch is None:
        return
    snap["torch.default_dtype"] = str(torch.get_default_dtype())
    snap["torch.default_device"] = str(torch.get_default_device())
    snap["torch.num_threads"] = torch.get_num_threads()
    snap["torch.num_interop_threads"] = torch.get_num_interop_threads()
    snap["torch.deterministic_algorithms"] = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    snap["torch.grad_enabled"] = torch.is_grad_enabled()
    snap["torch.inference_mode"] = torch.is_inference_mode_enabled()
    snap["torch.function_mode_stack"] = torch._C._len_torch_function_stack()
    snap["torch.float32_matmul_precision"] = torch.get_float32_matmul_precision()
    snap["torch.cudnn"] = (
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    snap["torch.cuda.current_device"] = _value(torch.cuda.current_device)
    snap["torch.cuda.is_available"] = _value(torch.cuda.is_available)


def _distributed(snap: Snapshot) -> None:
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available():
        return
    # Wrapped by the CPU redirects (upstream_pytest.cpu) while they are active.
    snap["torch.distributed.init_process_group"] = _value(dist.init_process_group)
    snap["torch.distributed.new_group"] = _value(dist.new_group)
    if not dist.is_initialized():
        snap["torch.distributed"] = "not initialized"
        return
    snap["torch.distributed"] = (
        f"initialized: backend {dist.get_backend()}, rank {dist.get_rank()} of "
        f"{dist.get_world_size()}"
    )


def _parallel_state(snap: Snapshot) -> None:
    ps = sys.modules.get("megatron.core.parallel_state")
    if ps is None:
        return
    if not ps.model_parallel_is_initialized():
        snap["megatron.core.parallel_state"] = "not initialized"
        return
    sizes = {
        "tp": ps.get_tensor_model_parallel_world_size,
        "pp": ps.get_pipeline_model_parallel_world_size,
        "cp": ps.get_context_parallel_world_size,
        "ep": ps.get_expert_model_parallel_world_size,
        "dp": ps.get_data_parallel_world_size,
    }
    layout = ", ".join(f"{name} {get()}" for name, get in sizes.items())
    snap["megatron.core.parallel_state"] = f"initialized: {layout}"


def _registries(snap: Snapshot) -> None:
    for module_name, names in REGISTRIES.items():
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name in names:
            snap[f"{module_name}.{name}"] = _value(getattr(module, name, None))


def snapshot() -> Snapshot:
    """Everything process-wide a test must leave as it found it (see the module docstring)."""
    snap: Snapshot = {f"os.environ[{k}]": v for k, v in os.environ.items() if k not in IGNORED_ENV}
    snap["cwd"] = os.getcwd()
    # As a set: pytest itself puts a test package's root back in front when an import moved
    # another entry there (its `prepend` import mode); an entry added or removed is what counts.
    snap["sys.path"] = sorted({p for p in sys.path if not p.endswith(IMPORT_PATHS)})
    for sig in SIGNALS:
        snap[f"signal handler {sig.name}"] = _value(signal.getsignal(sig))
    snap["imported"] = sorted(name for name in IMPORT_EFFECTS if name in sys.modules)
    _torch(snap)
    _distributed(snap)
    _parallel_state(snap)
    _registries(snap)
    return snap


def changed(before: Snapshot, after: Snapshot) -> dict[str, tuple[object, object]]:
    """Keys whose value differs, as (before, after); `<unset>` where a side lacks the key. A
    key first seen after (a module the test imported) is compared with its PRISTINE value, or
    not at all; environment variables and signal handlers are always there to compare."""
    out: dict[str, tuple[object, object]] = {}
    imported = set(after.get("imported", ())) - set(before.get("imported", ()))  # type: ignore[call-overload]
    by_import = {key for name in imported for key in IMPORT_EFFECTS[name]} | {"imported"}
    for key in before.keys() | after.keys():
        if key in by_import:
            continue
        new = after.get(key, UNSET)
        if key in before:
            old = before[key]
        elif key in PRISTINE:
            old = PRISTINE[key]
        elif key.startswith(("os.environ", "signal")):
            old = UNSET
        else:
            continue
        if old != new:
            out[key] = (old, new)
    return out


def _short(value: object, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _describe(diff: dict[str, tuple[object, object]]) -> str:
    return "\n".join(
        f"  {key}: {_short(old)} -> {_short(new)}" for key, (old, new) in sorted(diff.items())
    )


@dataclass(frozen=True)
class Footprint:
    """What a fixture wider than a function changed at its setup: `keys`, between `before` and
    `after` its setup."""

    name: str
    before: Snapshot
    after: Snapshot
    keys: set[str]

    def left(self, now: Snapshot) -> dict[str, tuple[object, object]]:
        """The keys whose setup change is still in force `now`. A list (sys.path) counts by its
        own entries: others that imports added meanwhile (excused where they happened) stay."""
        out: dict[str, tuple[object, object]] = {}
        for key in self.keys:
            old = self.before.get(key, PRISTINE.get(key, UNSET))
            set_up, new = self.after.get(key, UNSET), now.get(key, UNSET)
            if isinstance(old, list) and isinstance(set_up, list) and isinstance(new, list):
                added, removed = set(set_up) - set(old), set(old) - set(set_up)
                if added & set(new) or removed - set(new):
                    out[key] = (old, new)
            elif old != new:
                out[key] = (old, new)
        return out


class StateGuard:
    """The per-test and per-fixture bookkeeping (one instance per session)."""

    def __init__(self) -> None:
        self.before_item: Snapshot = {}
        # Fixtures wider than a function, while set up: their `Footprint`.
        self.footprints: dict[int, Footprint] = {}
        self.excused: set[str] = set()
        # Wider fixtures torn down in the current test's teardown.
        self.torn_down: list[Footprint] = []

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None]:
        self.before_item = snapshot()
        self.excused = set()
        self.torn_down = []
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> Generator[None, object, object]:
        if fixturedef.scope == "function":
            return (yield)
        before = snapshot()
        result = yield
        after = snapshot()
        keys = set(changed(before, after))
        name = f"{fixturedef.argname} of {fixturedef.baseid or 'the root'} ({fixturedef.scope})"
        self.footprints[id(fixturedef)] = Footprint(name, before, after, keys)
        self.excused |= keys
        return result

    def pytest_fixture_post_finalizer(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> None:
        held = self.footprints.pop(id(fixturedef), None)
        if held is not None:
            self.torn_down.append(held)

    def _fixture_leaks(self, now: Snapshot) -> list[str]:
        """What a wider fixture torn down in this teardown left changed, read once the whole
        teardown ran (a fixture's state may be restored by the fixture it depends on)."""
        leaks = []
        for footprint in self.torn_down:
            self.excused |= footprint.keys
            left = footprint.left(now)
            if left:
                leaks.append(
                    f"fixture {footprint.name!r} left changed what it set up:\n" + _describe(left)
                )
        return leaks

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, object, object]:
        result = yield  # a teardown that raised is reported as that error, not checked
        self._check(item)
        return result

    def _check(self, item: pytest.Item) -> None:
        after = snapshot()
        messages = self._fixture_leaks(after)
        diff = {k: v for k, v in changed(self.before_item, after).items() if k not in self.excused}
        if diff:
            messages.insert(0, f"{item.nodeid} left process-wide state changed:\n{_describe(diff)}")
        _restore(diff)
        if messages:
            pytest.fail(
                "\n".join(messages)
                + "\nrestore it in the test or fixture that changed it (tests/support/state_guard.py)",
                pytrace=False,
            )


def _restore(diff: dict[str, tuple[object, object]]) -> None:
    """Put back what can be put back simply (environment, working directory), so one leak is
    reported once and not again in every later test."""
    for key, (old, _new) in diff.items():
        if key.startswith("os.environ["):
            name = key[len("os.environ[") : -1]
            if old == UNSET:
                os.environ.pop(name, None)
            else:
                os.environ[name] = str(old)
        elif key == "cwd":
            os.chdir(str(old))


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(StateGuard(), "state_guard")
