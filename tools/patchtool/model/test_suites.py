"""`patches/upstream-tests.toml`: where each upstream keeps its own unit tests, and which tree
its regression gate compares against.

Why a file of its own: the manifest (upstreams.toml) says where an upstream comes from and is
rewritten by `pin`/`rebase`; this says how its own test suite is laid out, which only changes
when the upstream reorganises its tests.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..errors import PatchToolError
from .series import Patch

SUITES_PATH = Path("patches") / "upstream-tests.toml"
# What `verify --record` measured of the suites: the status page renders it.
RECORD_PATH = Path("docs") / "upstream-tests.json"
MAIN_RECORD_PATH = Path("docs") / "upstream-tests-main.json"  # verify --on main --record
UPSTREAM_TEST_KEY = "Upstream-Test"


@dataclass(frozen=True)
class UpstreamSuite:
    """One upstream's own unit-test layout."""

    upstream: str
    tests_root: str  # e.g. "tests/unit_tests"
    package: str  # the source prefix the tests mirror, e.g. "megatron/core"
    baseline: str = ""  # "" = the pin; else the series patch after which the tree imports
    baseline_reason: str = ""
    timeout: int = 120
    # Patches that do not carry their upstream test yet, each with why: lint accepts exactly
    # these without `Upstream-Test:` (and refuses a listed patch that has one), so the gap is
    # visible in one place instead of silently allowed.
    pending: dict[str, str] = field(default_factory=dict)
    # Upstream tests the gate finds broken by the series whose fix is not in the patch yet,
    # each with why: reported as known (never hidden), not failing verify; a listed test that
    # is no longer broken is reported so the entry goes.
    known_broken: dict[str, str] = field(default_factory=dict)
    # Patches whose upstream test needs hardware this machine lacks (a CUDA GPU), each with
    # why: its "not verified here" (the test skipped) is reported, not failing verify; the
    # patch's tripwire still proves it. Only a skip is excused: a failure is not.
    needs_hardware: dict[str, str] = field(default_factory=dict)
    # Extra pytest arguments for every run of this suite (plugins, a marker expression), after
    # the CPU plugin and before the nodes.
    args: tuple[str, ...] = ()
    # Gate directories too slow for every verify, each with why (the minutes measured): left
    # out of the gate unless `verify --full-gate`, and listed in its report, never silently.
    deferred: dict[str, str] = field(default_factory=dict)

    @property
    def test_top(self) -> str:
        """The top-level directory of the upstream's tests (`tests`): a patch's files below it
        are its tests, every other file is its source change."""
        return PurePosixPath(self.tests_root).parts[0]

    def is_test_file(self, path: str) -> bool:
        return PurePosixPath(path).parts[:1] == (self.test_top,)

    def gate_dirs(self, patch: Patch, tree: Path) -> list[str]:
        """The upstream test directories of the source files `patch` changes.

        A source file `<package>/a/b/c.py` maps to `<tests_root>/a/b/`; where that directory
        does not exist, the nearest existing parent below `tests_root` (never `tests_root`
        itself, which is the whole suite, unless the file lies directly in `package`). The
        gate runs the test files directly in each.
        """
        found: set[str] = set()
        for diff in patch.files:
            rel = PurePosixPath(diff.path)
            if self.is_test_file(diff.path) or rel.suffix != ".py":
                continue
            try:
                parts = rel.parent.relative_to(self.package).parts
            except ValueError:
                continue
            candidates = [
                PurePosixPath(self.tests_root, *parts[:k]) for k in range(len(parts), 0, -1)
            ]
            candidates = candidates or [PurePosixPath(self.tests_root)]
            hit = next((c.as_posix() for c in candidates if (tree / c).is_dir()), None)
            if hit:
                found.add(hit)
        return sorted(found)


def upstream_tests(patch: Patch) -> list[str]:
    """The patch's `Upstream-Test:` nodes (pytest node ids relative to the upstream root)."""
    return patch.trailer_values(UPSTREAM_TEST_KEY)


def load_suites(root: Path) -> dict[str, UpstreamSuite]:
    """Every upstream's suite from `<root>/patches/upstream-tests.toml` ({} when absent)."""
    path = root / SUITES_PATH
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise PatchToolError(f"{SUITES_PATH}: not valid TOML ({exc})") from exc
    suites: dict[str, UpstreamSuite] = {}
    for name, table in data.items():
        if not isinstance(table, dict):
            raise PatchToolError(f"{SUITES_PATH}: [{name}] must be a table")
        suites[name] = _suite(name, table)
    return suites


def _suite(name: str, table: dict[str, object]) -> UpstreamSuite:
    where = f"{SUITES_PATH} [{name}]"
    for key in ("tests_root", "package"):
        if not isinstance(table.get(key), str) or not table[key]:
            raise PatchToolError(f'{where}: `{key}` missing or empty (e.g. tests_root = "tests")')
    timeout = table.get("timeout", 120)
    if not isinstance(timeout, int) or timeout <= 0:
        raise PatchToolError(f"{where}: `timeout` must be a positive number of seconds")
    baseline = str(table.get("baseline", ""))
    reason = str(table.get("baseline_reason", ""))
    if baseline and not reason:
        raise PatchToolError(
            f"{where}: baseline {baseline!r} needs `baseline_reason` (why the pin itself "
            "cannot run its tests)"
        )
    pending = _reasons(
        table, "pending", where, "each patch file name to why it has no upstream test yet"
    )
    known = _reasons(table, "known_broken", where, "each upstream test node id to why it is broken")
    hardware = _reasons(
        table, "needs_hardware", where, "each patch file name to the hardware its test needs"
    )
    args = table.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) and a for a in args):
        raise PatchToolError(
            f'{where}: `args` must be a list of pytest arguments (e.g. ["-m", "not slow"])'
        )
    deferred = _reasons(table, "deferred", where, "each test directory to why the gate defers it")
    return UpstreamSuite(
        upstream=name,
        args=tuple(args),
        deferred={k.strip("/"): v for k, v in deferred.items()},
        known_broken=known,
        needs_hardware=hardware,
        pending=pending,
        tests_root=str(table["tests_root"]).strip("/"),
        package=str(table["package"]).strip("/"),
        baseline=baseline,
        baseline_reason=reason,
        timeout=timeout,
    )


def _reasons(table: dict[str, object], key: str, where: str, what: str) -> dict[str, str]:
    """A `name -> why` table of the suite (`pending`, `known_broken`, `deferred`): every
    reason a non-empty string, or the one line that says what it must map."""
    value = table.get(key, {})
    if not isinstance(value, dict) or not all(
        isinstance(v, str) and v.strip() for v in value.values()
    ):
        raise PatchToolError(f"{where}: `{key}` must map {what}")
    return {str(k): str(v) for k, v in value.items()}
