"""source/nested_wiring.py on a small stack shaped like ours (tests/tools/nested_stack.py).

Expectations are read independently of the code under test: the uv source paths with tomllib
from the checkouts' own pyproject files, where they land with os.path.realpath, and HEADs with
plain git.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.tools.nested_stack import (
    BRIDGE,
    BRIDGE_IN_RL,
    LM,
    LM_IN_BRIDGE,
    RL,
    STANDIN_SPEC,
    Stack,
    make_stack,
)
from tests.tools.repos import run
from tools.patchtool.errors import PatchToolError
from tools.patchtool.model.manifest import load_manifest
from tools.patchtool.source.checkout import dirty_files
from tools.patchtool.source.nested_plan import plan_links, uv_lock_paths
from tools.patchtool.source.nested_wiring import (
    BLOCKED,
    FOREIGN,
    NO_TARGET,
    UNWIRED,
    WIRED,
    unwire_host,
    wire_host,
    wiring_status,
)


@pytest.fixture
def stack(tmp_path: Path, isolated_git: None) -> Stack:
    return make_stack(tmp_path)


def _wire_all(stack: Stack) -> None:
    manifest = load_manifest(stack.root)
    for up in manifest.upstreams.values():
        wire_host(stack.root, manifest, up)


def _unwire_all(stack: Stack) -> None:
    manifest = load_manifest(stack.root)
    for up in manifest.upstreams.values():
        unwire_host(stack.root, manifest, up)


def uv_source(checkout: Path, package: str) -> Path:
    """The path `package` comes from in `checkout`'s `[tool.uv.sources]` (read with tomllib)."""
    data = tomllib.loads((checkout / "pyproject.toml").read_text())
    return checkout / data["tool"]["uv"]["sources"][package]["path"]


def head(path: Path) -> str:
    return run(["rev-parse", "HEAD"], path)


def snapshot(repo: Path) -> dict[str, object]:
    """What a host checkout looks like to git and on disk (links included, .git excluded)."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(repo):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in sorted(dirnames + filenames):
            path = Path(dirpath, name)
            kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
            entries.append((path.relative_to(repo).as_posix(), kind))
    exclude = Path(run(["rev-parse", "--git-path", "info/exclude"], repo))
    exclude = exclude if exclude.is_absolute() else repo / exclude
    return {
        "entries": sorted(entries),
        "index": run(["ls-files", "-s", "-v"], repo),
        "config": run(["config", "--local", "--list"], repo),
        "exclude": exclude.read_text() if exclude.exists() else "",
        "status": run(["status", "--porcelain"], repo),
        "head": head(repo),
    }


def test_plan_reads_each_checkouts_uv_sources(stack: Stack) -> None:
    links = plan_links(stack.root, load_manifest(stack.root))
    found = {(link.host, link.path, link.target, link.distribution) for link in links}
    assert found == {
        (RL, BRIDGE_IN_RL, BRIDGE, "megatron-bridge"),
        (BRIDGE, LM_IN_BRIDGE, LM, "megatron-core"),  # trailing "/" of the source dropped
    }


def test_wired_uv_sources_land_on_our_checkouts(stack: Stack) -> None:
    rl, bridge, lm = (stack.checkout(n) for n in (RL, BRIDGE, LM))
    run(["commit", "-q", "--allow-empty", "-m", "a patch"], lm)  # our HEAD is not the pin
    _wire_all(stack)
    bridge_via_rl = uv_source(rl, "megatron-bridge")
    lm_via_bridge = uv_source(bridge_via_rl, "megatron-core")
    assert os.path.realpath(bridge_via_rl) == os.path.realpath(bridge)
    assert os.path.realpath(lm_via_bridge) == os.path.realpath(lm)
    assert head(bridge_via_rl) == head(bridge)
    assert head(lm_via_bridge) == head(lm) != stack.pins[LM]
    # Relative links: the superproject can move.
    assert not os.readlink(rl / BRIDGE_IN_RL).startswith("/")
    moved = stack.root.parent / "moved"
    stack.root.rename(moved)
    lm_moved = uv_source(uv_source(moved / "3rdparty" / RL, "megatron-bridge"), "megatron-core")
    assert os.path.realpath(lm_moved) == os.path.realpath(moved / "3rdparty" / LM)


def test_wiring_is_invisible_to_git_and_keeps_the_gitlinks(stack: Stack) -> None:
    rl, bridge = stack.checkout(RL), stack.checkout(BRIDGE)
    before = {
        repo: run(["ls-tree", "HEAD", "--", path], repo)
        for repo, path in ((rl, BRIDGE_IN_RL), (bridge, LM_IN_BRIDGE))
    }
    _wire_all(stack)
    for repo, path in ((rl, BRIDGE_IN_RL), (bridge, LM_IN_BRIDGE)):
        assert run(["status", "--porcelain"], repo) == ""  # would fail without skip-worktree
        assert dirty_files(repo) == []
        assert run(["ls-tree", "HEAD", "--", path], repo) == before[repo]
        assert run(["ls-files", "-s", "--", path], repo).split()[:2] == [
            "160000",
            before[repo].split()[2],
        ]
    # A real change of the user's is still reported.
    (rl / "nemo_rl" / "__init__.py").write_text("# my edit\n")
    (rl / "notes.txt").write_text("mine\n")
    assert sorted(line[3:] for line in dirty_files(rl)) == ["nemo_rl/__init__.py", "notes.txt"]


def test_dirty_files_ignores_a_link_whose_skip_worktree_bit_was_lost(stack: Stack) -> None:
    rl = stack.checkout(RL)
    _wire_all(stack)
    run(["update-index", "--no-skip-worktree", "--", BRIDGE_IN_RL], rl)
    assert subprocess.run(["git", "status"], cwd=rl, capture_output=True).returncode != 0
    assert dirty_files(rl) == []
    _wire_all(stack)  # apply puts the bit back
    assert run(["status", "--porcelain"], rl) == ""


def test_wire_twice_is_a_noop(stack: Stack) -> None:
    manifest = load_manifest(stack.root)
    _wire_all(stack)
    before = {n: snapshot(stack.checkout(n)) for n in (RL, BRIDGE, LM)}
    states = wire_host(stack.root, manifest, manifest.upstreams[RL])
    assert [(s.state, s.made) for s in states] == [(WIRED, False)]
    _wire_all(stack)
    assert {n: snapshot(stack.checkout(n)) for n in (RL, BRIDGE, LM)} == before


def test_unwire_restores_every_checkout_exactly(stack: Stack) -> None:
    before = {n: snapshot(stack.checkout(n)) for n in (RL, BRIDGE, LM)}
    _wire_all(stack)
    assert (stack.checkout(RL) / BRIDGE_IN_RL).is_symlink()
    _unwire_all(stack)
    assert {n: snapshot(stack.checkout(n)) for n in (RL, BRIDGE, LM)} == before
    _unwire_all(stack)  # nothing left to do
    assert {n: snapshot(stack.checkout(n)) for n in (RL, BRIDGE, LM)} == before


def test_initialised_nested_checkout_with_work_is_refused_and_left_intact(stack: Stack) -> None:
    rl = stack.checkout(RL)
    nested = rl / BRIDGE_IN_RL
    nested.rmdir()
    run(["clone", "-q", str(stack.root.parent / "upstreams" / BRIDGE), str(nested)], rl)
    (nested / "src" / "megatron" / "bridge" / "__init__.py").write_text("my work\n")
    (nested / "scratch.py").write_text("untracked work\n")
    before = snapshot(rl), snapshot(nested)
    manifest = load_manifest(stack.root)
    with pytest.raises(PatchToolError) as info:
        wire_host(stack.root, manifest, manifest.upstreams[RL])
    message = str(info.value)
    assert f"3rdparty/{RL}/{BRIDGE_IN_RL} holds a checkout with uncommitted changes" in message
    assert "src/megatron/bridge/__init__.py, scratch.py" in message
    assert f"git -C 3rdparty/{RL} submodule deinit {BRIDGE_IN_RL}" in message
    assert "nothing was changed" in message
    assert (snapshot(rl), snapshot(nested)) == before
    row = wiring_status(stack.root, manifest, manifest.upstreams[RL])
    assert [link["state"] for link in row["links"]] == [BLOCKED]  # type: ignore[index]


def test_files_or_a_foreign_link_at_the_nested_path_are_refused(stack: Stack) -> None:
    rl = stack.checkout(RL)
    manifest = load_manifest(stack.root)
    (rl / BRIDGE_IN_RL / "mine.txt").write_text("x\n")
    with pytest.raises(PatchToolError, match="holds files that are not a checkout"):
        wire_host(stack.root, manifest, manifest.upstreams[RL])
    assert (rl / BRIDGE_IN_RL / "mine.txt").read_text() == "x\n"
    shutil.rmtree(rl / BRIDGE_IN_RL)
    (rl / BRIDGE_IN_RL).symlink_to("/tmp")
    with pytest.raises(
        PatchToolError, match=r"is a link to /tmp, not to our 3rdparty/Megatron-Bridge"
    ):
        wire_host(stack.root, manifest, manifest.upstreams[RL])
    assert os.readlink(rl / BRIDGE_IN_RL) == "/tmp"
    row = wiring_status(stack.root, manifest, manifest.upstreams[RL])
    assert [link["state"] for link in row["links"]] == [FOREIGN]  # type: ignore[index]


def test_standin_bridge_gets_its_nested_path_from_nemo_rls_lock(
    tmp_path: Path, isolated_git: None
) -> None:
    stack = make_stack(tmp_path, bridge_standin=True)
    rl, bridge, lm = (stack.checkout(n) for n in (RL, BRIDGE, LM))
    assert not (bridge / "pyproject.toml").exists()
    manifest = load_manifest(stack.root)
    before = snapshot(bridge)
    _wire_all(stack)
    # The megatron-core path of NeMo-RL's uv.lock (read with tomllib), through our links.
    lock = tomllib.loads((rl / "uv.lock").read_text())
    core = next(p for p in lock["package"] if p["name"] == "megatron-core")
    assert os.path.realpath(rl / core["source"]["editable"]) == os.path.realpath(lm)
    assert run(["status", "--porcelain"], bridge) == "" and dirty_files(bridge) == []
    rows = {n: wiring_status(stack.root, manifest, manifest.upstreams[n]) for n in (RL, BRIDGE)}
    [rl_link] = rows[RL]["links"]  # type: ignore[misc]
    assert f"release stand-in ({STANDIN_SPEC}) without pyproject.toml" in rl_link["note"]
    assert "uv cannot build megatron-bridge from it" in rl_link["note"]
    assert "no pyproject.toml here" in str(rows[BRIDGE]["note"])
    [bridge_link] = rows[BRIDGE]["links"]  # type: ignore[misc]
    assert bridge_link["state"] == WIRED and "uv.lock" in bridge_link["origin"]
    _unwire_all(stack)
    assert snapshot(bridge) == before  # the 3rdparty/ folder the link needed is gone too


def test_uv_lock_scan_matches_tomllib(stack: Stack) -> None:
    rl = stack.checkout(RL)
    lock = tomllib.loads((rl / "uv.lock").read_text())
    expected = {p["name"]: next(iter(p["source"].values())) for p in lock["package"]}
    assert uv_lock_paths(rl) == expected


def test_missing_target_or_host(tmp_path: Path, isolated_git: None) -> None:
    stack = make_stack(tmp_path, with_rl=False)
    manifest = load_manifest(stack.root)
    row = wiring_status(stack.root, manifest, manifest.upstreams[RL])
    assert row == {
        "applicable": False,
        "note": f"not applicable: 3rdparty/{RL} absent",
        "links": [],
    }
    assert wire_host(stack.root, manifest, manifest.upstreams[RL]) == []
    shutil.rmtree(stack.checkout(LM))
    [state] = wire_host(stack.root, manifest, manifest.upstreams[BRIDGE])
    assert state.state == NO_TARGET and not (stack.checkout(BRIDGE) / LM_IN_BRIDGE).is_symlink()


def test_status_before_and_after(stack: Stack) -> None:
    manifest = load_manifest(stack.root)
    row = wiring_status(stack.root, manifest, manifest.upstreams[RL])
    assert row["note"] == "0/1 nested paths linked to our checkouts: run tools/patches apply"
    [link] = row["links"]  # type: ignore[misc]
    assert link["state"] == UNWIRED and link["recorded"] == stack.pins[BRIDGE]
    _wire_all(stack)
    row = wiring_status(stack.root, manifest, manifest.upstreams[RL])
    assert row["note"] == "1/1 nested paths linked to our checkouts"
    lm_row = wiring_status(stack.root, manifest, manifest.upstreams[LM])
    assert lm_row["applicable"] is False and lm_row["links"] == []


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs the uv binary")
def test_editable_install_from_nemo_rls_paths_imports_our_trees(stack: Stack) -> None:
    """`uv pip install --no-deps -e` of the paths NeMo-RL's and Bridge's pyproject name (read
    with tomllib) into a scratch venv: both packages import from our checkouts."""
    _wire_all(stack)
    bridge_path = uv_source(stack.checkout(RL), "megatron-bridge")
    core_path = uv_source(bridge_path, "megatron-core")
    venv = stack.root.parent / "venv"
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    subprocess.run(["uv", "venv", "-q", "-p", py, str(venv)], check=True)
    for path in (core_path, bridge_path):
        subprocess.run(
            [
                "uv",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "-p",
                str(venv / "bin" / "python"),
                "-e",
                str(path),
            ],
            check=True,
        )
    probe = "import megatron.core as c, megatron.bridge as b; print(c.__file__); print(b.__file__)"
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert os.path.realpath(out[0]) == os.path.realpath(
        stack.checkout(LM) / "megatron" / "core" / "__init__.py"
    )
    assert os.path.realpath(out[1]) == os.path.realpath(
        stack.checkout(BRIDGE) / "src" / "megatron" / "bridge" / "__init__.py"
    )


def test_fetch_works_while_wired_and_its_setting_comes_back(stack: Stack) -> None:
    rl = stack.checkout(RL)
    run(["config", "fetch.recurseSubmodules", "on-demand"], rl)  # the user's own setting
    _wire_all(stack)
    assert run(["config", "--get", "fetch.recurseSubmodules"], rl) == "false"
    run(["fetch", "-q", "origin"], rl)  # fails on the linked submodule path if it recursed
    _unwire_all(stack)
    assert run(["config", "--get", "fetch.recurseSubmodules"], rl) == "on-demand"
    bridge = stack.checkout(BRIDGE)
    assert run(["config", "--get", "fetch.recurseSubmodules"], bridge, check=False) == ""
