"""verify: a tripwire is proven only if it passes with the series and fails without its patch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cpu_load import cpu_burners, load_average
from tests.tools.sandbox import REPO_ROOT, Sandbox, run, write
from tools.patchtool.apply.apply import apply_upstream
from tools.patchtool.commands.verify import render_table
from tools.patchtool.model.manifest import load_manifest
from tools.patchtool.model.series import FileDiff, Patch, parse_patch
from tools.patchtool.verify.session import (
    Options,
    StackResult,
    verify_stack,
    verify_upstream,
    verify_upstreams,
)
from tools.patchtool.verify.tripwire import NOT_RUN, import_roots, tripwire_hook

# Tripwires read the tree verify names in PATCHTOOL_TREE_UP (tests/support/upstream_tree.py).
TREE = (
    "import os\nfrom pathlib import Path\n\n\n"
    "def _tree() -> Path:\n"
    "    default = Path(__file__).parents[1] / '3rdparty/Up'\n"
    "    return Path(os.environ.get('PATCHTOOL_TREE_UP', default))\n\n\n"
)
TRIP = (
    TREE + "def _mod() -> str:\n"
    "    return (_tree() / 'mod.py').read_text()\n\n\n"
    "def test_trip():\n    assert 'VALUE = 2' in _mod()\n\n\n"
    "def test_always():\n    assert 'VALUE' in _mod()\n\n\n"
    "def test_never():\n    assert 'VALUE = 3' in _mod()\n"
)


def _trailers(test: str) -> str:
    return f"Upstream-Status: pending\nOrigin: tests\nTest: tests/test_trip.py::{test}\n"


def _prove(sandbox: Sandbox, test: str) -> tuple[list, Path]:
    repo, pin = sandbox.upstream("Up", {"mod.py": "VALUE = 1\n", "other.py": "x = 1\n"})
    patch = sandbox.make_patch(repo, pin, {"mod.py": "VALUE = 2\n"}, "Fix", _trailers(test))
    sandbox.add("Up", str(repo), pin)
    write(sandbox.root, {"tests/test_trip.py": TRIP})
    sandbox.set_series("Up", {"fix.patch": patch})
    sandbox.commit()
    up = load_manifest(sandbox.root).upstreams["Up"]
    assert apply_upstream(sandbox.root, up).state == "applied"
    return verify_upstream(sandbox.root, up, Path(sys.executable), progress=False), repo


def test_real_tripwire_is_proven_and_tree_restored(sandbox: Sandbox) -> None:
    proofs, _ = _prove(sandbox, "test_trip")
    assert [(p.with_patch, p.without_patch, p.verdict) for p in proofs] == [
        ("passed", "failed", "proven")
    ]
    checkout = sandbox.root / "3rdparty/Up"
    assert (checkout / "mod.py").read_text() == "VALUE = 2\n"
    assert run(checkout, "status", "--porcelain") == ""
    assert "proven" in render_table(proofs)


def test_tripwire_states_are_read_back_until_a_test_or_the_series_changes(
    sandbox: Sandbox,
) -> None:
    """A second verify reads both tripwire states back (same verdict, said in a note); a
    changed test file or --fresh runs them again. (`verify_upstream`, which rebase calls on
    checkouts off the manifest's pins, neither reads nor keeps.)"""
    _prove(sandbox, "test_trip")
    up = load_manifest(sandbox.root).upstreams["Up"]

    def again(**options: bool) -> StackResult:
        opts = Options(jobs=2, own_tests=False, gate=False, **options)
        return verify_stack(sandbox.root, [up], Path(sys.executable), False, opts)

    def read_back(result: StackResult) -> str:
        return next((n for n in result.notes if "read back from .cache/patchtool" in n), "")

    assert read_back(again()) == ""
    second = again()
    assert read_back(second).startswith("2 of 2 states read back")
    assert [(p.with_patch, p.without_patch, p.verdict) for p in second.proofs] == [
        ("passed", "failed", "proven")
    ]
    assert read_back(again(fresh=True)) == ""
    write(sandbox.root, {"tests/test_trip.py": TRIP.replace("VALUE = 2", "VALUE = 3")})
    changed = again()
    assert read_back(changed) == ""
    assert changed.proofs[0].verdict == "NOT PROVEN"  # the edited test ran, not a cached one
    write(sandbox.root, {"tests/test_trip.py": TRIP})
    assert read_back(again()).startswith("2 of 2")


def test_without_the_fork_server_each_state_is_a_fresh_interpreter(sandbox: Sandbox) -> None:
    """`--no-fork-server`: the same proof with one fresh pytest process per state."""
    repo, pin = sandbox.upstream("Up", {"mod.py": "VALUE = 1\n"})
    patch = sandbox.make_patch(repo, pin, {"mod.py": "VALUE = 2\n"}, "Fix", _trailers("test_trip"))
    sandbox.add("Up", str(repo), pin)
    write(sandbox.root, {"tests/test_trip.py": TRIP})
    sandbox.set_series("Up", {"fix.patch": patch})
    sandbox.commit()
    up = load_manifest(sandbox.root).upstreams["Up"]
    assert apply_upstream(sandbox.root, up).state == "applied"
    proofs = verify_upstreams(
        sandbox.root, [up], Path(sys.executable), progress=False, fork_server=False
    )
    assert [(p.with_patch, p.without_patch, p.verdict) for p in proofs] == [
        ("passed", "failed", "proven")
    ]


def test_test_that_cannot_fail_is_not_proven(sandbox: Sandbox) -> None:
    proofs, _ = _prove(sandbox, "test_always")
    assert proofs[0].verdict == "NOT PROVEN"
    assert "does not trip without the patch" in proofs[0].detail


def test_test_failing_with_the_patch_is_not_proven(sandbox: Sandbox) -> None:
    proofs, _ = _prove(sandbox, "test_never")
    assert proofs[0].verdict == "NOT PROVEN"
    assert "fails with the patch" in proofs[0].detail


def test_a_state_importing_from_the_checkout_proves_nothing(sandbox: Sandbox) -> None:
    """The module-origin guard, through verify: a tripwire that imports the patched module
    from the user's checkout (not its state's scratch tree) makes its states invalid, and
    the patch is NOT PROVEN, saying which module came from where."""
    test = (
        "import sys\nfrom pathlib import Path\n\n\n"
        "def test_trip():\n"
        "    sys.path.insert(0, str(Path(__file__).parents[1] / '3rdparty/Up'))\n"
        "    import mod\n\n"
        "    assert mod.VALUE == 2\n"
    )
    repo, pin = sandbox.upstream("Up", {"mod.py": "VALUE = 1\n"})
    patch = sandbox.make_patch(repo, pin, {"mod.py": "VALUE = 2\n"}, "Fix", _trailers("test_trip"))
    sandbox.add("Up", str(repo), pin)
    write(sandbox.root, {"tests/test_trip.py": test})
    sandbox.set_series("Up", {"fix.patch": patch})
    sandbox.commit()
    up = load_manifest(sandbox.root).upstreams["Up"]
    assert apply_upstream(sandbox.root, up).state == "applied"
    proofs = verify_upstream(sandbox.root, up, Path(sys.executable), progress=False)
    assert [(p.with_patch, p.without_patch, p.verdict) for p in proofs] == [
        ("invalid", "invalid", "NOT PROVEN")
    ]
    assert "the series state is invalid" in proofs[0].detail
    assert "mod from " in proofs[0].detail and "3rdparty/Up/mod.py" in proofs[0].detail


def test_missing_upstream_is_reported_not_verified(sandbox: Sandbox) -> None:
    repo, pin = sandbox.upstream("Up", {"mod.py": "VALUE = 1\n"})
    patch = sandbox.make_patch(repo, pin, {"mod.py": "VALUE = 2\n"}, "Fix", _trailers("test_trip"))
    sandbox.add("Up", "file:///nonexistent/up.git", pin, clone=False)
    sandbox.set_series("Up", {"fix.patch": patch})
    up = load_manifest(sandbox.root).upstreams["Up"]
    proofs = verify_upstream(sandbox.root, up, Path(sys.executable), progress=False)
    assert [(p.source, p.verdict, p.with_patch) for p in proofs] == [
        ("missing", "not verified here", NOT_RUN)
    ]
    assert "insteadOf" in proofs[0].detail


def test_tripwire_hook_runs_the_tests_on_the_new_base_tree(sandbox: Sandbox) -> None:
    """The rebase evidence hook: tests see the (sparse) scratch tree through PATCHTOOL_TREE_UP."""
    trip = (
        "import os\nfrom pathlib import Path\n\n\n"
        "def test_trip():\n"
        "    tree = Path(os.environ.get('PATCHTOOL_TREE_UP', 'missing'))\n"
        "    assert (tree / 'mod.py').read_text() == 'VALUE = 2\\n'\n"
    )
    repo, pin = sandbox.upstream("Up", {"mod.py": "VALUE = 2\n", "pkg/other.py": "x = 1\n"})
    patch = sandbox.make_patch(
        repo, pin, {"pkg/other.py": "x = 2\n"}, "Fix", _trailers("test_trip")
    )
    sandbox.add("Up", str(repo), pin)
    write(sandbox.root, {"tests/test_trip.py": trip})
    sandbox.set_series("Up", {"fix.patch": patch})
    scratch = sandbox.tmp / "scratch"
    run(sandbox.tmp, "clone", "-q", "--no-checkout", str(repo), str(scratch))
    run(scratch, "config", "core.sparseCheckout", "true")
    (scratch / ".git/info/sparse-checkout").write_text("/pkg/other.py\n")
    run(scratch, "checkout", "-q", pin)
    assert not (scratch / "mod.py").exists()  # sparse: the hook must rebuild the whole tree
    hook = tripwire_hook(sandbox.root, "Up", Path(sys.executable))
    parsed = parse_patch(sandbox.root / "patches/Up/fix.patch")
    assert hook("fix.patch", parsed, scratch) is True
    run(scratch, "commit", "-q", "--allow-empty", "-m", "noop")
    (sandbox.tmp / "upstreams/Up/mod.py").write_text("VALUE = 1\n")
    run(sandbox.tmp / "upstreams/Up", "commit", "-qam", "regress")
    run(scratch, "fetch", "-q", "origin")
    run(scratch, "checkout", "-q", "FETCH_HEAD")
    assert hook("fix.patch", parsed, scratch) is False


# The left-out state announces itself (its pid, its tree) and then hangs like a slow test.
HANG = TREE + (
    "import time\n\n\n"
    "def test_trip():\n"
    "    if 'VALUE = 2' not in (_tree() / 'mod.py').read_text():\n"
    "        marker = Path(__file__).parents[1] / 'started'\n"
    "        marker.write_text(f'{os.getpid()} {os.getppid()} {_tree()}')\n"
    "        time.sleep(120)\n"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _ignore_sigint() -> None:
    """What a non-interactive shell does to a background job (`cmd &`): SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# (signal, the machine loaded on purpose, SIGINT ignored by verify's parent)
INTERRUPTS = [
    pytest.param(signal.SIGTERM, False, False, id="SIGTERM"),
    pytest.param(signal.SIGINT, False, False, id="SIGINT"),
    pytest.param(signal.SIGHUP, False, False, id="SIGHUP"),
    pytest.param(signal.SIGINT, False, True, id="SIGINT-background-job"),
    pytest.param(signal.SIGINT, True, True, id="SIGINT-background-job-loaded"),
    pytest.param(signal.SIGTERM, True, False, id="SIGTERM-loaded"),
]
# Half the hang the state plants (HANG sleeps 120 s): a verify that waited for its state, the
# bug, cannot end inside it. Not a machine-speed figure: verify ends 0.2 s after the signal on
# an idle machine, but a fresh-clone CI run (2026-11-28, load average 7.6, disk pressure) took
# 27.3 s against the earlier 15 s bound.
INTERRUPT_BOUND_S = 60.0


@pytest.mark.parametrize(("sig", "loaded", "background"), INTERRUPTS)
def test_interrupted_verify_leaves_the_checkout_patched_and_nothing_behind(
    sandbox: Sandbox, tmp_path: Path, sig: signal.Signals, loaded: bool, background: bool
) -> None:
    """Issue 18 defect 10: a signal during the left-out state (a CI timeout) used to leave the
    user's checkout with the patch reverse-applied. The checkout is never changed now, and the
    pytest processes and scratch trees are gone when verify has exited.

    Issue 25: verify started as a shell's background job inherits SIGINT ignored and went on
    until its states finished (the suite's flake, seen when the suite itself ran in the
    background); it now ends within `INTERRUPT_BOUND_S` of any of the signals, also with every
    core busy twice over."""
    repo, pin = sandbox.upstream("Up", {"mod.py": "VALUE = 1\n"})
    patch = sandbox.make_patch(repo, pin, {"mod.py": "VALUE = 2\n"}, "Fix", _trailers("test_trip"))
    sandbox.add("Up", str(repo), pin)
    write(sandbox.root, {"tests/test_trip.py": HANG})
    sandbox.set_series("Up", {"fix.patch": patch})
    sandbox.commit()
    up = load_manifest(sandbox.root).upstreams["Up"]
    assert apply_upstream(sandbox.root, up).state == "applied"
    scratch_tmp = tmp_path / "scratch-tmp"
    scratch_tmp.mkdir()
    tool = [sys.executable, str(REPO_ROOT / "tools" / "patches"), "--root", str(sandbox.root)]
    env = dict(os.environ, TMPDIR=str(scratch_tmp))
    verify = subprocess.Popen(
        [*tool, "verify", "--python", sys.executable, "--json"],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_ignore_sigint if background else None,
    )
    marker = sandbox.root / "started"
    deadline = time.monotonic() + 120
    while not marker.exists() and verify.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), verify.communicate()
    time.sleep(0.3)  # the marker is written before the pid/tree text lands
    pid_text, parent_text, tree = marker.read_text().split(" ", 2)
    checkout = sandbox.root / "3rdparty/Up"
    assert not Path(tree).resolve().is_relative_to(checkout.resolve())  # a scratch tree
    assert (checkout / "mod.py").read_text() == "VALUE = 2\n"  # while the state runs
    with cpu_burners(None if loaded else 0):
        if loaded:
            time.sleep(2)  # the burners are running
        sent = time.monotonic()
        verify.send_signal(sig)
        try:
            _, err = verify.communicate(timeout=60)
        finally:
            verify.kill()
        latency = time.monotonic() - sent
    print(f"verify ended {latency:.2f} s after {sig.name} (load average {load_average():.1f})")
    assert verify.returncode == 130, err
    assert latency < INTERRUPT_BOUND_S, f"verify took {latency:.1f} s to end after {sig.name}"
    assert (checkout / "mod.py").read_text() == "VALUE = 2\n"
    assert run(checkout, "status", "--porcelain") == ""
    deadline = time.monotonic() + 10
    while _alive(int(pid_text)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(int(pid_text)), "the pytest process of the state outlived verify"
    assert not _alive(int(parent_text)), "the fork server outlived verify"
    assert list(scratch_tmp.iterdir()) == []  # no scratch tree left


def test_every_state_is_a_process_of_its_own_on_every_upstreams_tree(sandbox: Sandbox) -> None:
    """Two upstreams, one patch each: four states (each patch with the series, each without
    it), four processes; every state names a scratch tree for both upstreams (a left-out
    state changes only its own), and both proofs hold."""
    for name in ("Up", "Dn"):
        repo, pin = sandbox.upstream(name, {"mod.py": "VALUE = 1\n"})
        trailer = f"Upstream-Status: pending\nOrigin: tests\nTest: tests/test_{name.lower()}.py::test_trip\n"
        patch = sandbox.make_patch(repo, pin, {"mod.py": "VALUE = 2\n"}, "Fix", trailer)
        sandbox.add(name, str(repo), pin)
        sandbox.set_series(name, {"fix.patch": patch})
        var = f"PATCHTOOL_TREE_{name.upper()}"
        test = (
            "import os\nfrom pathlib import Path\n\n\n"
            "def test_trip():\n"
            "    log = Path(__file__).parents[1] / 'pids.log'\n"
            "    trees = [os.environ.get(v, '-') for v in ('PATCHTOOL_TREE_UP', 'PATCHTOOL_TREE_DN')]\n"
            "    with log.open('a') as out:\n"
            f"        out.write(f'{name} {{os.getpid()}} {{trees[0]}} {{trees[1]}}\\n')\n"
            f"    tree = Path(os.environ.get('{var}', Path(__file__).parents[1] / '3rdparty/{name}'))\n"
            "    assert 'VALUE = 2' in (tree / 'mod.py').read_text()\n"
        )
        write(sandbox.root, {f"tests/test_{name.lower()}.py": test})
    sandbox.commit()
    manifest = load_manifest(sandbox.root)
    ups = [manifest.upstreams["Up"], manifest.upstreams["Dn"]]
    for up in ups:
        assert apply_upstream(sandbox.root, up).state == "applied"
    proofs = verify_upstreams(sandbox.root, ups, Path(sys.executable), progress=False, jobs=2)
    assert [(p.upstream, p.verdict) for p in proofs] == [("Up", "proven"), ("Dn", "proven")]
    rows = [line.split() for line in (sandbox.root / "pids.log").read_text().splitlines()]
    assert len(rows) == 4 and len({pid for _, pid, _, _ in rows}) == 4
    for _, _, up_tree, dn_tree in rows:
        assert "-" not in (up_tree, dn_tree)  # both upstreams' trees named in every state
        assert not Path(up_tree).is_relative_to(sandbox.root)  # scratch trees, never checkouts
        assert not Path(dn_tree).is_relative_to(sandbox.root)
    series = {Path(r[2]).name for r in rows if r[0] == "Dn"} | {
        Path(r[3]).name for r in rows if r[0] == "Up"
    }
    assert series == {"series"}  # the other upstream's tree is its series tree
    own = sorted(Path(r[2] if r[0] == "Up" else r[3]).name for r in rows)
    assert own == ["series", "series", "without-fix", "without-fix"]


def _touching(*paths: str) -> Patch:
    patch = Patch(path=Path("x.patch"))
    patch.files = [FileDiff(old_path=p, new_path=p, line=1) for p in paths]
    return patch


def test_import_roots_stop_at_the_first_regular_package(tmp_path: Path) -> None:
    """Megatron-LM (`megatron/core`) and Megatron-Bridge (`src/megatron/bridge`) share the
    namespace package `megatron`: each owns only its regular package below it, else every
    state of a two-upstream verify finds one upstream's modules in the other's tree."""
    root, lm, bridge = tmp_path / "project", tmp_path / "lm", tmp_path / "bridge"
    (root / "tests").mkdir(parents=True)
    write(lm, {"megatron/core/__init__.py": "", "megatron/core/distributed/__init__.py": ""})
    write(
        bridge, {"src/megatron/bridge/__init__.py": "", "src/megatron/bridge/peft/__init__.py": ""}
    )
    lm_roots = import_roots(
        [_touching("megatron/core/distributed/ddp.py", "setup.py", "docs/conf.txt")], root, lm
    )
    assert lm_roots == ["megatron.core", "setup"]
    bridge_patch = _touching("src/megatron/bridge/peft/lora_layers.py", "tests/test_x.py")
    assert import_roots([bridge_patch], root, bridge) == ["megatron.bridge"]
    assert import_roots([_touching("pkg/nested/mod.py")], root, bridge) == ["pkg.nested"]


def test_the_series_state_runs_every_patchs_tests_in_one_process(sandbox: Sandbox) -> None:
    """Two patches of one upstream: three processes, not four. One state runs both patches'
    tests on the series tree; each left-out state runs only its own patch's test, and a test
    still fails there when its own patch is left out (both proofs hold)."""
    repo, pin = sandbox.upstream("Up", {"a.py": "A = 1\n", "b.py": "B = 1\n"})
    sandbox.add("Up", str(repo), pin)
    patches = {}
    for name in ("a", "b"):
        trailer = (
            f"Upstream-Status: pending\nOrigin: tests\nTest: tests/test_{name}.py::test_trip\n"
        )
        patches[f"fix-{name}.patch"] = sandbox.make_patch(
            repo, pin, {f"{name}.py": f"{name.upper()} = 2\n"}, f"Fix {name}", trailer
        )
        test = (
            "import os\nfrom pathlib import Path\n\n\n"
            "def test_trip():\n"
            "    tree = Path(os.environ['PATCHTOOL_TREE_UP'])\n"
            "    with (Path(__file__).parents[1] / 'pids.log').open('a') as out:\n"
            f"        out.write(f'{name} {{os.getpid()}} {{tree.name}}\\n')\n"
            f"    assert '{name.upper()} = 2' in (tree / '{name}.py').read_text()\n"
        )
        write(sandbox.root, {f"tests/test_{name}.py": test})
    sandbox.set_series("Up", patches)
    sandbox.commit()
    up = load_manifest(sandbox.root).upstreams["Up"]
    assert apply_upstream(sandbox.root, up).state == "applied"
    proofs = verify_upstreams(sandbox.root, [up], Path(sys.executable), progress=False, jobs=2)
    assert [p.verdict for p in proofs] == ["proven", "proven"]
    rows = [line.split() for line in (sandbox.root / "pids.log").read_text().splitlines()]
    series = {(test, pid) for test, pid, tree in rows if tree == "series"}
    assert {test for test, _ in series} == {"a", "b"}
    assert len({pid for _, pid in series}) == 1  # both tests, one process
    left_out = sorted((test, tree) for test, _, tree in rows if tree != "series")
    assert left_out == [("a", "without-fix-a"), ("b", "without-fix-b")]
    assert len({pid for _, pid, _ in rows}) == 3


def test_a_patch_whose_lines_a_dependent_changes_is_left_out_with_it(sandbox: Sandbox) -> None:
    """The second patch changes the very line the first adds and says `Depends-On` it (as the
    MoE token counts extend shared-prefix attention in Megatron-LM's series): the first cannot
    be reverse-applied alone, so its left-out state leaves out the tail of the series from it
    on; each tripwire is still proven."""
    repo, pin = sandbox.upstream("Up", {"mod.py": "VALUE = 1\n"})
    first = sandbox.make_patch(repo, pin, {"mod.py": "VALUE = 2\n"}, "Fix", _trailers("test_trip"))
    base = run(sandbox.tmp / "dev" / repo.name, "rev-parse", "HEAD")
    second_trailers = (
        "Upstream-Status: pending\nOrigin: tests\nTest: tests/test_more.py::test_more\n"
        "Depends-On: Up/first.patch\n"
    )
    second = sandbox.make_patch(repo, base, {"mod.py": "VALUE = 22\n"}, "Extend", second_trailers)
    sandbox.add("Up", str(repo), pin)
    more = TREE + "def test_more():\n    assert 'VALUE = 22' in (_tree() / 'mod.py').read_text()\n"
    write(sandbox.root, {"tests/test_trip.py": TRIP, "tests/test_more.py": more})
    sandbox.set_series("Up", {"first.patch": first, "second.patch": second})
    sandbox.commit()
    up = load_manifest(sandbox.root).upstreams["Up"]
    assert apply_upstream(sandbox.root, up).state == "applied"
    proofs = verify_upstream(sandbox.root, up, Path(sys.executable), progress=False)
    assert [(p.patch, p.verdict) for p in proofs] == [
        ("first.patch", "proven"),
        ("second.patch", "proven"),
    ]
