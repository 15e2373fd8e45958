"""verify's upstream half: a patch's Upstream-Test is proven from the upstream tree (fails with
the source change left out, the test kept), and the regression gate names the test a patch
breaks and the patch that broke it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.tools.sandbox import Sandbox, run, write
from tools.patchtool.apply.apply import apply_upstream
from tools.patchtool.commands.verify import _failed, render_gate, render_upstream
from tools.patchtool.errors import PatchToolError
from tools.patchtool.model.manifest import load_manifest
from tools.patchtool.model.series import parse_patch
from tools.patchtool.model.test_suites import load_suites
from tools.patchtool.verify.regression import cause
from tools.patchtool.verify.session import Options, StackResult, verify_stack

SUITES = '[Up]\ntests_root = "tests/unit"\npackage = "pkg"\nbaseline = ""\ntimeout = 60\n'
UPSTREAM = {
    "pkg/__init__.py": "",
    "pkg/sub/__init__.py": "",
    "pkg/sub/mod.py": "VALUE = 1\n",
    "pkg/other/__init__.py": "",
    "pkg/other/thing.py": "X = 1\n",
    "tests/__init__.py": "",
    "tests/unit/__init__.py": "",
    "tests/unit/sub/__init__.py": "",
    "tests/unit/sub/test_mod.py": (
        "from pkg.sub.mod import VALUE\n\n\n"
        "def test_positive():\n    assert VALUE > 0\n\n\n"
        "def test_is_one():\n    assert VALUE == 1\n"
    ),
    "tests/unit/other/__init__.py": "",
    "tests/unit/other/test_thing.py": "from pkg.other.thing import X\n\n\ndef test_x():\n    assert X\n",
}
NEW_TEST = "from pkg.sub.mod import VALUE\n\n\ndef test_two():\n    assert VALUE == 2\n"
UPDATED = UPSTREAM["tests/unit/sub/test_mod.py"].replace("VALUE == 1", "VALUE == 2")


def _trailers(upstream_test: str) -> str:
    return (
        "Upstream-Status: pending\nOrigin: tests\nTest: tests/test_trip.py::test_trip\n"
        f"Upstream-Test: {upstream_test}\n"
    )


def _stack(
    sandbox: Sandbox,
    patches: list[tuple[str, dict[str, str], str]],
    suites: str = SUITES,
    extra_trailers: dict[str, str] | None = None,
    opts: Options | None = None,
    upstream: dict[str, str] | None = None,
) -> StackResult:
    """An upstream (`upstream`, else UPSTREAM) with `patches` (name, files, Upstream-Test)
    applied in order, a patch's `extra_trailers` (e.g. Depends-On) added to its own; verify's
    upstream half run on it."""
    repo, pin = sandbox.upstream("Up", upstream or UPSTREAM)
    base, series = pin, {}
    for name, files, node in patches:
        trailers = _trailers(node) + (extra_trailers or {}).get(name, "")
        series[name] = sandbox.make_patch(repo, base, files, f"Fix {name}", trailers)
        base = run(sandbox.tmp / "dev" / repo.name, "rev-parse", "HEAD")
    sandbox.add("Up", str(repo), pin)
    write(sandbox.root, {"patches/upstream-tests.toml": suites})
    sandbox.preload_for_upstream_suites()
    sandbox.set_series("Up", series)
    sandbox.commit()
    up = load_manifest(sandbox.root).upstreams["Up"]
    assert apply_upstream(sandbox.root, up).state == "applied"
    opts = opts or Options(jobs=2, tripwires=False)
    return verify_stack(sandbox.root, [up], Path(sys.executable), False, opts)


def test_upstream_test_proven_and_updated_expectation_keeps_the_gate_green(
    sandbox: Sandbox,
) -> None:
    files = {
        "pkg/sub/mod.py": "VALUE = 2\n",
        "tests/unit/sub/test_fix.py": NEW_TEST,
        "tests/unit/sub/test_mod.py": UPDATED,
    }
    result = _stack(sandbox, [("fix.patch", files, "tests/unit/sub/test_fix.py::test_two")])
    (proof,) = result.upstream
    assert (proof.with_fix, proof.without_fix, proof.verdict) == ("passed", "failed", "proven")
    assert proof.gate_dirs == ["tests/unit/sub"]
    (gate,) = result.gates
    assert gate.broken == []
    assert (gate.total.run, gate.total.passed, gate.total.added) == (3, 3, 1)
    assert "proven" in render_upstream(result.upstream)
    assert "0 broken by the series" in render_gate(gate)
    # The checkout is only read.
    assert run(sandbox.root / "3rdparty/Up", "status", "--porcelain") == ""


def test_upstream_test_that_passes_without_the_source_change_is_not_proven(
    sandbox: Sandbox,
) -> None:
    always = "def test_two():\n    assert True\n"
    files = {
        "pkg/sub/mod.py": "VALUE = 2\n",
        "tests/unit/sub/test_fix.py": always,
        "tests/unit/sub/test_mod.py": UPDATED,
    }
    result = _stack(sandbox, [("fix.patch", files, "tests/unit/sub/test_fix.py::test_two")])
    (proof,) = result.upstream
    assert proof.verdict == "NOT PROVEN"
    assert "passes without the patch's source change" in proof.detail


def test_gate_names_the_broken_test_and_the_patch_that_broke_it(sandbox: Sandbox) -> None:
    """Three patches; the second changes VALUE without updating test_is_one: the gate reports
    test_is_one broken by the second patch, not the last."""
    thing = "tests/unit/other/test_thing.py"
    extra = "tests/unit/other/test_extra.py"
    first = {
        "pkg/other/thing.py": "X = 2\n",
        thing: UPSTREAM[thing] + "\n\ndef test_y():\n    assert X == 2\n",
    }
    second = {"pkg/sub/mod.py": "VALUE = 2\n", "tests/unit/sub/test_fix.py": NEW_TEST}
    third = {
        "pkg/other/extra.py": "Z = 3\n",
        extra: "from pkg.other.extra import Z\n\n\ndef test_z():\n    assert Z == 3\n",
    }
    result = _stack(
        sandbox,
        [
            ("first.patch", first, f"{thing}::test_y"),
            ("second.patch", second, "tests/unit/sub/test_fix.py::test_two"),
            ("third.patch", third, f"{extra}::test_z"),
        ],
    )
    (gate,) = result.gates
    assert [(b.node, b.patch) for b in gate.broken] == [
        ("tests/unit/sub/test_mod.py::test_is_one", "second.patch")
    ]
    assert gate.per_patch["second.patch"].broken == 1
    assert gate.per_patch["first.patch"].broken == 0
    assert "BROKEN tests/unit/sub/test_mod.py::test_is_one by second.patch" in render_gate(gate)
    assert {p.patch: p.verdict for p in result.upstream} == dict.fromkeys(
        ("first.patch", "second.patch", "third.patch"), "proven"
    )


# Beside test_mod.py: a test that passes on both trees, one whose name that one prefixes and
# that the series breaks, one the series removes, and one that fails on both.
MORE = "tests/unit/sub/test_more.py"
MORE_TESTS = (
    "from pkg.sub.mod import VALUE\n\n\n"
    "def test_int():\n    assert isinstance(VALUE, int)\n\n\n"
    "def test_int_below_two():\n    assert VALUE < 2\n\n\n"
    "def test_never():\n    assert VALUE < 0\n"
)
GONE = "\n\n\ndef test_gone():\n    assert True\n"


def test_baseline_runs_only_what_does_not_pass_on_the_series_and_finds_the_same_breaks(
    sandbox: Sandbox,
) -> None:
    """The baseline leaves out the tests that pass on the series (exact node ids: test_int
    out, test_int_below_two still run) and still finds every break, a removed test included;
    `--full-baseline` runs them all and finds the same."""
    upstream = {**UPSTREAM, MORE: MORE_TESTS + GONE}
    patch = {**BREAKS_IS_ONE, MORE: MORE_TESTS}
    result = _stack(sandbox, [("fix.patch", patch, FIX_NODE)], upstream=upstream)
    (gate,) = result.gates
    broken = [
        "tests/unit/sub/test_mod.py::test_is_one",
        f"{MORE}::test_gone",
        f"{MORE}::test_int_below_two",
    ]
    assert sorted(b.node for b in gate.broken) == broken
    assert {b.node: b.after for b in gate.broken}[f"{MORE}::test_gone"] == "gone"
    t = gate.total
    # Left out: test_positive and test_int (test_two is new: added, not collected before).
    assert (t.not_run_before, t.failing_before, t.added, t.fixed) == (2, 1, 1, 0)
    assert "2 passing on the series not run before" in render_gate(gate)
    up = load_manifest(sandbox.root).upstreams["Up"]
    full = Options(jobs=2, tripwires=False, full_baseline=True)
    (whole,) = verify_stack(sandbox.root, [up], Path(sys.executable), False, full).gates
    assert sorted(b.node for b in whole.broken) == broken
    assert (whole.total.not_run_before, whole.total.failing_before) == (0, 1)


def test_suite_layout_maps_sources_to_the_mirrored_test_directory(tmp_path: Path) -> None:
    write(tmp_path, {"patches/upstream-tests.toml": SUITES, "tests/unit/sub/test_a.py": ""})
    suite = load_suites(tmp_path)["Up"]
    patch_text = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: A <a@b>\nDate: Sun, 22 Nov 2026 00:00:00 +0000\nSubject: [PATCH] x\n\nbody\n---\n"
        "diff --git a/pkg/sub/deeper/mod.py b/pkg/sub/deeper/mod.py\n"
        "index 1111111111111111111111111111111111111111..2222222222222222222222222222222222222222 100644\n"
        "--- a/pkg/sub/deeper/mod.py\n+++ b/pkg/sub/deeper/mod.py\n@@ -1 +1 @@\n-a\n+b\n"
    )
    path = tmp_path / "x.patch"
    path.write_text(patch_text)
    assert suite.gate_dirs(parse_patch(path), tmp_path) == ["tests/unit/sub"]
    assert suite.is_test_file("tests/unit/sub/test_a.py")
    assert not suite.is_test_file("pkg/sub/mod.py")


def test_cause_groups_cpu_skips_and_failures() -> None:
    assert cause("skipped", "upstream-cpu: needs CUDA (Torch not compiled)") == "needs CUDA"
    assert (
        cause("failed", "AssertionError: 3 != 4 at 0x7f00") == "failed: AssertionError: N != N at N"
    )


def test_a_listed_known_broken_test_is_reported_and_does_not_fail_the_gate(
    sandbox: Sandbox,
) -> None:
    """`known_broken` in patches/upstream-tests.toml: the test is still reported (with the
    reason), not attributed and not counted as new; a listed test that is not broken is stale."""
    known = (
        '[Up.known_broken]\n"tests/unit/sub/test_mod.py::test_is_one" = "expectation update due"\n'
        '"tests/unit/sub/test_mod.py::test_positive" = "stale"\n'
    )
    files = {"pkg/sub/mod.py": "VALUE = 2\n", "tests/unit/sub/test_fix.py": NEW_TEST}
    node = "tests/unit/sub/test_fix.py::test_two"
    result = _stack(sandbox, [("fix.patch", files, node)], SUITES + known)
    (gate,) = result.gates
    assert [(b.node, b.known) for b in gate.broken] == [
        ("tests/unit/sub/test_mod.py::test_is_one", "expectation update due")
    ]
    assert gate.new_broken == []
    assert gate.stale_known == ["tests/unit/sub/test_mod.py::test_positive"]
    text = render_gate(gate)
    assert "known broken (patches/upstream-tests.toml)" in text
    assert "remove from known_broken" in text


# VALUE changes and test_mod.py::test_is_one (expects 1) is not updated: the gate's catch.
BREAKS_IS_ONE = {"pkg/sub/mod.py": "VALUE = 2\n", "tests/unit/sub/test_fix.py": NEW_TEST}
FIX_NODE = "tests/unit/sub/test_fix.py::test_two"


def test_a_deferred_directory_is_reported_not_gated_and_full_gate_runs_it(
    sandbox: Sandbox,
) -> None:
    """`[Up.deferred]`: the directory is left out of the gate and named with why; the patch's
    own upstream test there is still proven; `--full-gate` gates it (and finds the break)."""
    deferred = '[Up.deferred]\n"tests/unit/sub" = "20 minutes per tree"\n'
    result = _stack(sandbox, [("fix.patch", BREAKS_IS_ONE, FIX_NODE)], SUITES + deferred)
    (proof,) = result.upstream
    assert proof.verdict == "proven"
    assert (proof.gate_dirs, proof.deferred_dirs) == ([], ["tests/unit/sub"])
    (empty,) = result.gates  # nothing left to gate, no before/after run: the deferral is listed
    assert (empty.dirs, empty.total.run) == ([], 0)
    assert empty.deferred == {"tests/unit/sub": "20 minutes per tree"}
    assert "not gated in this run (verify --full-gate): tests/unit/sub" in render_gate(empty)
    up = load_manifest(sandbox.root).upstreams["Up"]
    full = Options(jobs=2, tripwires=False, full_gate=True)
    (gate,) = verify_stack(sandbox.root, [up], Path(sys.executable), False, full).gates
    assert [b.node for b in gate.broken] == ["tests/unit/sub/test_mod.py::test_is_one"]
    assert gate.deferred == {}


def test_deferred_directories_are_listed_in_the_gate_report(sandbox: Sandbox) -> None:
    deferred = '[Up.deferred]\n"tests/unit/other" = "slow here"\n'
    files = {**BREAKS_IS_ONE, "pkg/other/thing.py": "X = 1  # touched\n"}
    result = _stack(sandbox, [("fix.patch", files, FIX_NODE)], SUITES + deferred)
    (gate,) = result.gates
    assert (gate.dirs, gate.deferred) == (["tests/unit/sub"], {"tests/unit/other": "slow here"})
    assert "not gated in this run (verify --full-gate): tests/unit/other: slow here" in (
        render_gate(gate)
    )


def test_suite_args_reach_every_run_of_the_upstream_suite(sandbox: Sandbox) -> None:
    """`args` (e.g. a marker expression) apply to the gate's runs: the deselected broken test
    is not run, so nothing is broken."""
    args = 'args = ["-k", "not test_is_one"]\n'
    result = _stack(sandbox, [("fix.patch", BREAKS_IS_ONE, FIX_NODE)], SUITES + args)
    (gate,) = result.gates
    assert gate.broken == []
    assert (gate.total.run, gate.total.passed) == (2, 2)


def _read_back(result: StackResult) -> str:
    """The note saying how many states were read back from the cache ("" when none)."""
    return next((n for n in result.notes if "states read back from .cache/patchtool" in n), "")


def test_every_suite_state_is_read_back_until_anything_it_depends_on_changes(
    sandbox: Sandbox,
) -> None:
    """The second verify reads its three states (series, before, without the source) from
    .cache/patchtool/states and says so, with the same proof and gate; --fresh, a changed
    suite setting or a changed plugin source runs them again."""
    first = _stack(sandbox, [("fix.patch", BREAKS_IS_ONE, FIX_NODE)])
    assert _read_back(first) == ""
    up = load_manifest(sandbox.root).upstreams["Up"]

    def again(**options: bool) -> StackResult:
        opts = Options(jobs=2, tripwires=False, **options)
        return verify_stack(sandbox.root, [up], Path(sys.executable), False, opts)

    second = again()
    assert _read_back(second).startswith("3 of 3 states read back")
    assert [b.node for b in second.gates[0].broken] == [b.node for b in first.gates[0].broken]
    assert second.gates[0].total == first.gates[0].total
    assert [(p.with_fix, p.without_fix, p.verdict) for p in second.upstream] == [
        (p.with_fix, p.without_fix, p.verdict) for p in first.upstream
    ]
    # The series run read back and its baseline not: the baseline runs in a round of its own.
    (kept,) = [
        f
        for f in (sandbox.root / ".cache/patchtool/states").glob("*.json")
        if '"not-run"' in f.read_text()
    ]
    kept.unlink()
    third = again()
    assert _read_back(third).startswith("2 of 3 states read back")
    assert third.gates[0].total == first.gates[0].total
    assert kept.is_file()
    assert _read_back(again(fresh=True)) == ""
    write(sandbox.root, {"patches/upstream-tests.toml": SUITES.replace("60", "61")})
    assert _read_back(again()) == ""
    # A plugin source appearing (or changing) is a new key too.
    write(sandbox.root, {"integration/upstream_pytest/cpu.py": "# a plugin\n"})
    assert _read_back(again()) == ""
    assert _read_back(again()).startswith("3 of 3")


def test_plugin_sources_follow_the_plugins_imports_within_our_packages() -> None:
    from tools.patchtool.verify.state_cache import plugin_sources

    root = Path(__file__).resolve().parents[3]
    found = {
        p.relative_to(root / "integration").as_posix()
        for p in plugin_sources(root, ["upstream_pytest.cpu", "upstream_pytest.nemo_rl"])
    }
    assert {
        "mcore_grpo/__init__.py",
        "upstream_pytest/__init__.py",
        "upstream_pytest/cpu.py",
        "upstream_pytest/cpu_causes.py",
        "mcore_grpo/worker/cpu.py",
        "mcore_grpo/grpo/nemo_rl/automodel_compat.py",
    } <= found
    assert "mcore_grpo/grpo/driver/loop.py" not in found  # not imported by the plugins


def test_suite_args_and_deferred_are_validated(tmp_path: Path) -> None:
    bad = SUITES + 'args = "-m slow"\n'
    write(tmp_path, {"patches/upstream-tests.toml": bad})
    with pytest.raises(PatchToolError, match="`args` must be a list"):
        load_suites(tmp_path)
    write(tmp_path, {"patches/upstream-tests.toml": SUITES + '[Up.deferred]\n"tests/x" = ""\n'})
    with pytest.raises(PatchToolError, match="`deferred` must map"):
        load_suites(tmp_path)


def test_tripwire_left_out_state_keeps_upstream_tests_a_later_patch_extends(
    sandbox: Sandbox,
) -> None:
    """Two patches extend the same upstream test file: leaving the first out for its tripwire
    must not try to reverse its test hunks (the second's hunks sit on them)."""
    thing = "tests/unit/other/test_thing.py"
    first_test = UPSTREAM[thing] + "\n\ndef test_y():\n    assert X == 2\n"
    first = {"pkg/other/thing.py": "X = 2\n", thing: first_test}
    second = {
        "pkg/sub/mod.py": "VALUE = 2\n",
        "tests/unit/sub/test_mod.py": UPDATED,
        thing: first_test + "\n\ndef test_y2():\n    assert X > 1\n",
    }
    repo, pin = sandbox.upstream("Up", UPSTREAM)
    base, series = pin, {}
    for name, files, node in [
        ("first.patch", first, f"{thing}::test_y"),
        ("second.patch", second, f"{thing}::test_y2"),
    ]:
        series[name] = sandbox.make_patch(repo, base, files, f"Fix {name}", _trailers(node))
        base = run(sandbox.tmp / "dev" / repo.name, "rev-parse", "HEAD")
    sandbox.add("Up", str(repo), pin)
    write(sandbox.root, {"patches/upstream-tests.toml": SUITES})
    sandbox.set_series("Up", series)
    sandbox.commit()
    up = load_manifest(sandbox.root).upstreams["Up"]
    assert apply_upstream(sandbox.root, up).state == "applied"
    opts = Options(jobs=2, own_tests=False, gate=False)
    result = verify_stack(sandbox.root, [up], Path(sys.executable), False, opts)
    # The sandbox's tripwire always passes: not proven, but both left-out trees were built.
    assert [(p.patch, p.without_patch) for p in result.proofs] == [
        ("first.patch", "passed"),
        ("second.patch", "passed"),
    ]


def test_a_patch_a_later_one_depends_on_is_proven_without_the_tail(sandbox: Sandbox) -> None:
    """The second patch imports what the first adds (`Depends-On: Up/first.patch`) where the
    package and the suite's conftest import it: leaving the first out alone makes a tree in
    which no test collects. Its proof leaves out the source of both instead (the Gemma ->
    EXAONE case in Megatron-Bridge's series)."""
    first_test = "tests/unit/other/test_fix.py"
    first = {
        "pkg/other/thing.py": "X = 2\n\n\nclass Norm:\n    pass\n",
        first_test: (
            "from pkg.other.thing import X\nfrom pkg.sub.mod import VALUE  # noqa: F401\n\n\n"
            "def test_x2():\n    assert X == 2\n"
        ),
    }
    second_test = "tests/unit/sub/test_norm.py"
    second = {
        # The package imports the changed module, and the suite's conftest the package (as
        # Bridge's models/__init__ and its conftest do): without Norm no test collects.
        "pkg/__init__.py": "from pkg.sub import mod  # noqa: F401\n",
        "tests/conftest.py": "import pkg  # noqa: F401\n",
        "pkg/sub/mod.py": "from pkg.other.thing import Norm\n\nVALUE = 1\nNORM = Norm\n",
        second_test: "import pkg.sub.mod as m\n\n\ndef test_norm():\n    assert hasattr(m, 'NORM')\n",
    }
    result = _stack(
        sandbox,
        [
            ("first.patch", first, f"{first_test}::test_x2"),
            ("second.patch", second, f"{second_test}::test_norm"),
        ],
        extra_trailers={"second.patch": "Depends-On: Up/first.patch\n"},
    )
    verdicts = {p.patch: (p.with_fix, p.without_fix, p.verdict) for p in result.upstream}
    assert verdicts == {
        "first.patch": ("passed", "failed", "proven"),
        "second.patch": ("passed", "failed", "proven"),
    }
    # Failed for the fix's absence, not because nothing imports (an empty proof).
    first_proof = next(p for p in result.upstream if p.patch == "first.patch")
    assert "Norm" not in first_proof.without_detail
    assert "assert" in first_proof.without_detail


def test_a_skipped_upstream_test_fails_verify_unless_the_hardware_it_needs_is_listed(
    sandbox: Sandbox,
) -> None:
    """An upstream test that skips here (an adopted PR's CUDA-only test) proves nothing: verify
    fails on it, unless patches/upstream-tests.toml lists the patch under `needs_hardware`."""
    skipping = "import pytest\n\n\ndef test_two():\n    pytest.skip('CUDA required')\n"
    files = {
        "pkg/sub/mod.py": "VALUE = 2\n",
        "tests/unit/sub/test_fix.py": skipping,
        "tests/unit/sub/test_mod.py": UPDATED,
    }
    suites = SUITES + '\n[Up.needs_hardware]\n"fix.patch" = "a CUDA GPU"\n'
    opts = Options(jobs=2, tripwires=False)
    node = "tests/unit/sub/test_fix.py::test_two"
    result = _stack(sandbox, [("fix.patch", files, node)], suites=suites, opts=opts)
    (proof,) = result.upstream
    assert (proof.verdict, proof.needs_hardware) == ("not verified here", "a CUDA GPU")
    assert proof.excused and not _failed(result, opts, allow_missing=False)
    proof.needs_hardware = ""  # the same run, the patch not listed
    assert not proof.excused and _failed(result, opts, allow_missing=False)
