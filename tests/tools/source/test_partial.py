"""A mirror lacking a few blobs (issue 23): the shared Megatron-Bridge snapshot lacks two docs
GIFs, so git's transport refuses to clone from it. apply checks the exact pin out of it anyway
(its objects copied, the absent paths left out of a sparse checkout) and status names them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.tools.sandbox import UNREACHABLE, Sandbox, run
from tests.tools.source.test_mirror import _shallow_bare, _tool
from tools.patchtool.source.partial import absent_paths
from tools.patchtool.verify.trees import series_tree

GIF = "docs/images/big.gif"


def _partial_mirror(sandbox: Sandbox) -> tuple[Path, str]:
    """Upstream `Up` (a patch touching `docs/`) and a shallow bare mirror without GIF's blob."""
    files = {"mod.py": "VALUE = 1\n", "docs/guide.md": "guide\n", GIF: "GIF89a not really\n"}
    repo, pin = sandbox.upstream("Up", files)
    patch = sandbox.make_patch(
        repo, pin, {"docs/guide.md": "guide, fixed\n"}, "Fix docs", "Upstream-Status: pending\n"
    )
    sandbox.add("Up", UNREACHABLE, pin, clone=False)
    sandbox.set_series("Up", {"fix.patch": patch})
    sandbox.commit()
    mirror = sandbox.tmp / "m"
    bare = _shallow_bare(repo, mirror / "Up.git")
    packs = bare / "objects" / "pack"
    moved = sandbox.tmp / "packs"
    shutil.move(packs, moved)
    packs.mkdir()
    for pack in moved.glob("*.pack"):
        run(bare, "unpack-objects", "-q", input=pack.read_bytes())
    blob = run(repo, "rev-parse", f"{pin}:{GIF}")
    (bare / "objects" / blob[:2] / blob[2:]).unlink()
    return mirror, pin


def test_absent_paths_asks_the_object_store(sandbox: Sandbox) -> None:
    mirror, pin = _partial_mirror(sandbox)
    assert absent_paths(mirror / "Up.git", pin) == [GIF]
    whole = _shallow_bare(sandbox.tmp / "upstreams" / "Up", sandbox.tmp / "whole" / "Up.git")
    assert absent_paths(whole, pin) == []


def test_partial_mirror_gives_the_exact_pin_with_the_absent_paths_named(sandbox: Sandbox) -> None:
    mirror, pin = _partial_mirror(sandbox)
    clone = subprocess.run(
        ["git", "clone", "-q", "--bare", f"file://{mirror}/Up.git", "x"], cwd=sandbox.tmp
    )
    assert clone.returncode != 0  # what a submodule update meets
    applied = _tool(sandbox, "apply", "--mirror-dir", str(mirror))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    checkout = sandbox.root / "3rdparty/Up"
    assert (checkout / "docs/guide.md").read_text() == "guide, fixed\n"
    assert not (checkout / GIF).exists()
    assert run(checkout, "rev-parse", "refs/patchtool/pin") == pin
    assert run(checkout, "status", "--porcelain") == ""
    assert run(checkout, "ls-files", "-v", GIF) == f"S {GIF}"
    assert (
        run(checkout, "config", "--type=bool", "--default=false", "core.sparseCheckout") == "false"
    )
    assert not (checkout / ".git/objects/info/alternates").exists()  # outlives the mirror
    row = json.loads(_tool(sandbox, "status", "--json").stdout)["upstreams"][0]
    assert row["source"] == "mirror", row
    assert f"partial: 1 paths absent (blobs not in the mirror): {GIF}" in row["source_detail"]
    assert row["patches_applied"] == 1, row
    noop = _tool(sandbox, "apply", "--mirror-dir", str(mirror))
    assert noop.returncode == 0 and "already applied" in noop.stdout, noop.stdout + noop.stderr


def test_verify_reads_the_partial_checkout_without_the_absent_paths(sandbox: Sandbox) -> None:
    mirror, _ = _partial_mirror(sandbox)
    assert _tool(sandbox, "apply", "--mirror-dir", str(mirror)).returncode == 0
    tree = series_tree(sandbox.root / "3rdparty/Up", sandbox.tmp / "series-tree")
    assert (tree / "docs/guide.md").read_text() == "guide, fixed\n"
    assert not (tree / GIF).exists()
