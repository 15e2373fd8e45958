"""`port`, and `open-pr` / `lint` / `set-status` with a port onto main (model/ports.py).

The upstream's `main` moved past the pin (tag v1): one commit rewrote the line a patch
changes (a conflict), another the lines around a second patch's change (a clean 3-way merge).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.repos import commit, init_repo, make_patch, make_superproject, numbered, run
from tools.patchtool.cli import main
from tools.patchtool.lint.lint import lint_all
from tools.patchtool.model.manifest import load_manifest

pytestmark = pytest.mark.usefixtures("isolated_git")


@pytest.fixture(autouse=True)
def contributor(tmp_path: Path, isolated_git: None) -> None:
    """open-pr commits as git's user.name/user.email (the isolated global config)."""
    config = tmp_path / "isolated.gitconfig"
    config.write_text("[user]\n\tname = Ada Lovelace\n\temail = ada@example.org\n")


MOD = "pkg/mod.py"
TRAILERS = ["Upstream-Status: pending", "Origin: mcore-rl-stack", "Test: tests/test_x.py::test_fix"]


def _changed(lines: dict[int, str]) -> list[str]:
    """The 40 numbered lines of MOD with some replaced (1-based)."""
    return [lines.get(i, f"line {i}") for i in range(1, 41)]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Series: conflicting.patch (line 10), merging.patch (line 30), plain.patch (line 20)."""
    upstream = tmp_path / "upstream"
    init_repo(upstream, {MOD: numbered(40)})
    patches = [
        (
            f"{name}.patch",
            make_patch(upstream, "v1", {MOD: _changed({n: f"fixed {n}"})}, s, TRAILERS),
        )
        for name, n, s in (
            ("conflicting", 10, "Fix line ten"),
            ("merging", 30, "Fix line thirty"),
            ("plain", 20, "Fix line twenty"),
        )
    ]
    commit(upstream, "main moves on", {MOD: _changed({10: "main's 10", 33: "main's 33"})})
    sup = make_superproject(tmp_path / "super", upstream, patches=patches)
    (sup / "tests").mkdir()
    (sup / "tests/test_x.py").write_text("def test_fix():\n    pass\n")
    return sup


def port(root: Path, *args: str) -> int:
    return main(["--root", str(root), "port", *args])


def scratch_of(out: str) -> Path:
    return Path(next(x.split()[-1] for x in out.splitlines() if "port --resume" in x))


def lint(root: Path) -> list[str]:
    return [str(e) for e in lint_all(root, load_manifest(root))]


def test_conflict_resolved_by_hand_becomes_the_port_open_pr_opens_on_main(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert port(root, "patches/Up/conflicting.patch") == 2
    out = capsys.readouterr().out
    assert "conflicting.patch: conflict on main" in out and "pkg/mod.py" in out
    scratch = scratch_of(out)
    assert not (root / "patches/Up/main").exists()  # nothing written before the resolution
    (scratch / MOD).write_text("\n".join(_changed({10: "fixed 10", 33: "main's 33"})) + "\n")
    run(["add", MOD], scratch)
    run(["am", "--continue"], scratch, env={"GIT_EDITOR": "true"})
    assert port(root, "--resume", str(scratch)) == 0
    assert "resolved on main" in capsys.readouterr().out
    ported = root / "patches/Up/main/conflicting.patch"
    pin = (root / "patches/Up/conflicting.patch").read_bytes()
    assert ported.read_bytes().split(b"\ndiff --git")[0] == pin.split(b"\ndiff --git")[0]
    assert b"-main's 10\n+fixed 10" in ported.read_bytes()
    assert not scratch.exists()
    assert lint(root) == []

    assert main(["--root", str(root), "open-pr", "patches/Up/conflicting.patch"]) == 0
    out = capsys.readouterr().out
    assert "port:  patches/Up/main/conflicting.patch" in out
    checkout = root / "3rdparty/Up"
    text = run(["show", f"mcore-rl-stack/conflicting:{MOD}"], checkout).splitlines()
    assert (text[9], text[32]) == ("fixed 10", "main's 33")
    # --onto the pin: the pin patch, no port.
    args = ["--root", str(root), "open-pr", "patches/Up/conflicting.patch", "--onto", "v1"]
    assert main([*args, "--force"]) == 0
    assert "port:" not in capsys.readouterr().out


def test_three_way_merge_is_written_then_kept_and_byte_stable(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert port(root, "patches/Up/merging.patch") == 0
    assert "merging.patch: merged-3way on main" in capsys.readouterr().out
    ported = root / "patches/Up/main/merging.patch"
    first = ported.read_bytes()
    assert b"-line 30\n+fixed 30\n line 31\n line 32\n main's 33" in first
    assert port(root, "patches/Up/merging.patch") == 0
    assert "kept on main" in capsys.readouterr().out
    assert port(root, "patches/Up/merging.patch", "--from-pin") == 0
    assert ported.read_bytes() == first
    assert lint(root) == []


def test_a_patch_that_applies_on_main_needs_no_port_and_a_stale_one_goes(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = root / "patches/Up/main/plain.patch"
    stale.parent.mkdir()
    stale.write_bytes((root / "patches/Up/plain.patch").read_bytes())
    assert port(root, "patches/Up/plain.patch") == 0
    out = capsys.readouterr().out
    assert "not-needed" in out and "removed patches/Up/main/plain.patch" in out
    assert not stale.exists()


def test_lint_refuses_orphan_ports_and_ports_that_say_otherwise(root: Path) -> None:
    ports = root / "patches/Up/main"
    ports.mkdir()
    (ports / "gone.patch").write_bytes((root / "patches/Up/plain.patch").read_bytes())
    pin = (root / "patches/Up/merging.patch").read_bytes()
    (ports / "merging.patch").write_bytes(pin.replace(b"Origin: mcore-rl-stack", b"Origin: x"))
    errors = lint(root)
    assert any(e.startswith("patches/Up/main/gone.patch:1: orphan port") for e in errors)
    assert any(
        "patches/Up/main/merging.patch" in e and "trailers differ" in e and "Origin" in e
        for e in errors
    )
    assert len(errors) == 2


def test_set_status_rewrites_pin_patch_and_port_alike(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert port(root, "patches/Up/merging.patch") == 0
    url = "https://github.com/NVIDIA/x/pull/9"
    args = ["--root", str(root), "set-status", "patches/Up/merging.patch", "submitted", url]
    assert main(args) == 0
    assert "patches/Up/main/merging.patch" in capsys.readouterr().out
    for path in ("patches/Up/merging.patch", "patches/Up/main/merging.patch"):
        assert f"Upstream-Status: submitted {url}\n" in (root / path).read_text()
    assert lint(root) == []


def test_commands_take_the_pin_patch_not_its_port(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert port(root, "patches/Up/merging.patch") == 0
    capsys.readouterr()
    assert port(root, "patches/Up/main/merging.patch") == 1
    assert main(["--root", str(root), "open-pr", "patches/Up/main/merging.patch"]) == 1
    err = capsys.readouterr().err
    assert err.count("is a port: give the pin patch patches/Up/merging.patch") == 2
