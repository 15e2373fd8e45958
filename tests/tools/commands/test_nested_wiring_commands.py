"""apply / reset / status / check-pins with the nested wiring, through the CLI entry point."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.tools.nested_stack import BRIDGE, BRIDGE_IN_RL, LM, LM_IN_BRIDGE, RL, Stack, make_stack
from tests.tools.repos import run
from tools.patchtool.cli import main


@pytest.fixture
def stack(tmp_path: Path, isolated_git: None) -> Stack:
    return make_stack(tmp_path)


def _cli(stack: Stack, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["--root", str(stack.root), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_apply_wires_then_is_a_noop_and_reset_unwires(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    rl, bridge = stack.checkout(RL), stack.checkout(BRIDGE)
    code, out, _ = _cli(stack, capsys, "apply")
    assert code == 0
    assert (
        f"  {RL}: nested {BRIDGE_IN_RL} -> our {BRIDGE} (megatron-bridge): wired; "
        f"3rdparty/{RL}/{BRIDGE_IN_RL} -> ../../../{BRIDGE} [gitlink {stack.pins[BRIDGE][:12]} kept]"
    ) in out.splitlines()
    assert os.path.realpath(rl / BRIDGE_IN_RL) == os.path.realpath(bridge)
    code, out, _ = _cli(stack, capsys, "apply")
    assert code == 0 and "nested" not in out and out.count("nothing to do") == 3
    code, out, _ = _cli(stack, capsys, "apply", "--json")
    rows = {row["name"]: row for row in json.loads(out)["upstreams"]}
    assert [w["state"] for w in rows[RL]["wiring"]] == ["wired"]
    assert rows[LM]["wiring"] == []
    code, out, _ = _cli(stack, capsys, "reset")
    assert code == 0
    assert f"  {RL}: nested {BRIDGE_IN_RL}: link removed" in out.splitlines()
    assert f"  {BRIDGE}: nested {LM_IN_BRIDGE}: link removed" in out.splitlines()
    for repo, path in ((rl, BRIDGE_IN_RL), (bridge, LM_IN_BRIDGE)):
        nested = repo / path
        assert nested.is_dir() and not nested.is_symlink() and not any(nested.iterdir())
        assert run(["ls-files", "-v", "--", path], repo).startswith("H ")  # no skip-worktree
        assert run(["config", "--get-all", "patchtool.wired"], repo, check=False) == ""


def test_status_shows_the_wiring_per_upstream(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    _cli(stack, capsys, "apply")
    code, out, _ = _cli(stack, capsys, "status")
    assert code == 0
    lines = out.splitlines()
    at = lines.index(
        "  nested wiring: 1/1 nested paths linked to our checkouts",
        lines.index(next(ln for ln in lines if ln.startswith(f"{RL}:"))),
    )
    assert lines[at + 1].startswith(f"    {BRIDGE_IN_RL} -> our {BRIDGE} (megatron-bridge): wired")
    assert f"from 3rdparty/{RL}/pyproject.toml [tool.uv.sources]" in lines[at + 1]
    assert "clean" in out and "DIRTY" not in out
    code, out, _ = _cli(stack, capsys, "status", "--json", RL)
    [row] = json.loads(out)["upstreams"]
    assert row["clean"] is True
    assert row["wiring"]["applicable"] is True
    [link] = row["wiring"]["links"]
    assert (link["path"], link["target"], link["state"]) == (BRIDGE_IN_RL, BRIDGE, "wired")
    assert link["recorded"] == stack.pins[BRIDGE]
    _cli(stack, capsys, "reset")
    code, out, _ = _cli(stack, capsys, "status", RL)
    assert "nested wiring: 0/1 nested paths linked to our checkouts: run tools/patches apply" in out


def test_status_says_not_applicable_without_nemo_rl(
    tmp_path: Path, isolated_git: None, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = make_stack(tmp_path, with_rl=False)
    assert main(["--root", str(stack.root), "status", "--json", RL]) == 0
    out = capsys.readouterr().out
    [row] = json.loads(out)["upstreams"]
    assert row["source"] == "missing"
    assert row["wiring"] == {
        "applicable": False,
        "note": f"not applicable: 3rdparty/{RL} absent",
        "links": [],
    }


def test_apply_refuses_a_nested_checkout_with_work_and_changes_nothing(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    rl = stack.checkout(RL)
    nested = rl / BRIDGE_IN_RL
    nested.rmdir()
    run(["clone", "-q", str(stack.root.parent / "upstreams" / BRIDGE), str(nested)], rl)
    (nested / "work.py").write_text("mine\n")
    refs = run(["for-each-ref"], rl), run(["rev-parse", "HEAD"], rl)
    code, _, err = _cli(stack, capsys, "apply", RL)
    assert code == 1
    assert f"error: {RL}: " in err and f"3rdparty/{RL}/{BRIDGE_IN_RL} holds a checkout" in err
    assert "(work.py)" in err and "submodule deinit" in err
    assert (nested / "work.py").read_text() == "mine\n" and not nested.is_symlink()
    assert run(["ls-files", "-v", "--", BRIDGE_IN_RL], rl).startswith("H ")
    assert (run(["for-each-ref"], rl), run(["rev-parse", "HEAD"], rl)) == refs  # series not run


def test_check_pins_is_unchanged_by_the_wiring(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _cli(stack, capsys, "check-pins")
    assert before[0] == 0
    assert (
        f"nests {BRIDGE} at {stack.pins[BRIDGE][:12]}; ours {stack.pins[BRIDGE][:12]}: same"
        in (before[1])
    )
    assert f"nests {LM} at {stack.pins[LM][:12]}; ours {stack.pins[LM][:12]}: same" in before[1]
    _cli(stack, capsys, "apply")
    assert _cli(stack, capsys, "check-pins") == before
    code, out, _ = _cli(stack, capsys, "lint")
    assert code == 0, out


def test_a_pin_move_while_wired_fetches_and_rewires(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NeMo-RL's pin moves to a commit nesting another Bridge commit: apply fetches it through
    `git submodule update` (git fetch fails on a linked submodule path unless the wiring turned
    fetch recursion off), checks it out (git replaces the link by an empty directory) and links
    again, keeping the new gitlink."""
    with (tmp_path / "isolated.gitconfig").open("a") as config:  # submodule fetch of file URLs
        config.write('[protocol "file"]\n\tallow = always\n')
    assert _cli(stack, capsys, "apply")[0] == 0
    ups = stack.root.parent / "upstreams"
    run(["commit", "-q", "--allow-empty", "-m", "bridge next"], ups / BRIDGE)
    bridge_next = run(["rev-parse", "HEAD"], ups / BRIDGE)
    run(["update-index", "--cacheinfo", f"160000,{bridge_next},{BRIDGE_IN_RL}"], ups / RL)
    run(["commit", "-q", "-m", "bump bridge"], ups / RL)
    rl_next = run(["rev-parse", "HEAD"], ups / RL)
    manifest = stack.root / "patches" / "upstreams.toml"
    manifest.write_text(manifest.read_text().replace(stack.pins[RL], rl_next))
    run(["update-index", "--cacheinfo", f"160000,{rl_next},3rdparty/{RL}"], stack.root)
    code, out, err = _cli(stack, capsys, "apply", RL)
    assert code == 0, err
    assert f"applied 0 patches on {rl_next[:12]}" in out
    assert f"[gitlink {bridge_next[:12]} kept]" in out
    rl = stack.checkout(RL)
    assert os.path.realpath(rl / BRIDGE_IN_RL) == os.path.realpath(stack.checkout(BRIDGE))
    assert run(["status", "--porcelain"], rl) == ""
    assert run(["ls-files", "-s", "-v", "--", BRIDGE_IN_RL], rl).split()[:3] == [
        "S",
        "160000",
        bridge_next,
    ]
