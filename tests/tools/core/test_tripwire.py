"""verify: a tripwire is proven only if it passes with the series and fails without its patch."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.tools.sandbox import Sandbox, run, write
from tools.patchtool.commands.verify import render_table
from tools.patchtool.core.apply import apply_upstream
from tools.patchtool.core.manifest import load_manifest
from tools.patchtool.core.series import parse_patch
from tools.patchtool.core.tripwire import NOT_RUN, tripwire_hook, verify_upstream

TRIP = (
    "from pathlib import Path\n\n\n"
    "def _mod() -> str:\n"
    "    return (Path(__file__).parents[1] / '3rdparty/Up/mod.py').read_text()\n\n\n"
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


def test_test_that_cannot_fail_is_not_proven(sandbox: Sandbox) -> None:
    proofs, _ = _prove(sandbox, "test_always")
    assert proofs[0].verdict == "NOT PROVEN"
    assert "does not trip without the patch" in proofs[0].detail


def test_test_failing_with_the_patch_is_not_proven(sandbox: Sandbox) -> None:
    proofs, _ = _prove(sandbox, "test_never")
    assert proofs[0].verdict == "NOT PROVEN"
    assert "fails with the patch" in proofs[0].detail


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
