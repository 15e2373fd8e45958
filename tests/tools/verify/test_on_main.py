"""`verify --on main` (issue 58): each patch's upstream test proven on the upstream's main, with
the patch's port where the pin patch does not apply there; a patch main already carries is
left out and named as upstreamed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.tools.sandbox import Sandbox, run, write
from tests.tools.verify.test_upstream_proof import NEW_TEST, SUITES, UPSTREAM, _trailers
from tools.patchtool.cli import main
from tools.patchtool.model.manifest import load_manifest
from tools.patchtool.rebase.on_main import replay_on_main

THREE = "tests/unit/other/test_three.py"
THREE_TEST = "from pkg.other.thing import X\n\n\ndef test_three():\n    assert X == 3\n"
PY = ["--python", sys.executable, "--jobs", "2"]
UPDATED = UPSTREAM["tests/unit/sub/test_mod.py"].replace("VALUE == 1", "VALUE == 2")


def _series(sandbox: Sandbox, main_has_the_fix: bool = False) -> tuple[Path, str]:
    """Up at its pin with two patches; `main` rewrites the line the second patch changes (so
    it needs its port, written under patches/Up/main/) and, if asked, carries the first."""
    repo, pin = sandbox.upstream("Up", UPSTREAM)
    fix = {
        "pkg/sub/mod.py": "VALUE = 2\n",
        "tests/unit/sub/test_fix.py": NEW_TEST,
        "tests/unit/sub/test_mod.py": UPDATED,
    }
    series = {"fix.patch": sandbox.make_patch(repo, pin, fix, "Fix", _trailers(
        "tests/unit/sub/test_fix.py::test_two"))}  # fmt: skip
    three = {"pkg/other/thing.py": "X = 3\n", THREE: THREE_TEST}
    series["three.patch"] = sandbox.make_patch(
        repo, pin, three, "Three", _trailers(f"{THREE}::test_three")
    )
    moved = {"pkg/other/thing.py": "X = 1  # main\n", **(fix if main_has_the_fix else {})}
    write(repo, moved)
    run(repo, "add", "-A")
    run(repo, "commit", "-q", "-m", "main moves")
    head = run(repo, "rev-parse", "HEAD")
    run(sandbox.tmp / "dev" / repo.name, "fetch", "-q", "origin", "main")  # make_patch's clone
    port = sandbox.make_patch(repo, head, three, "Three", _trailers(f"{THREE}::test_three"))
    sandbox.add("Up", str(repo), pin)
    write(sandbox.root, {"patches/upstream-tests.toml": SUITES})
    sandbox.preload_for_upstream_suites()
    sandbox.set_series("Up", series)
    (sandbox.root / "patches/Up/main").mkdir()
    (sandbox.root / "patches/Up/main/three.patch").write_bytes(port)
    sandbox.commit()
    return repo, head


def test_the_replay_takes_the_port_where_the_pin_patch_does_not_apply(sandbox: Sandbox) -> None:
    _, head = _series(sandbox)
    up = load_manifest(sandbox.root).upstreams["Up"]
    replay = replay_on_main(sandbox.root, up)
    try:
        assert (replay.commit, replay.ported, replay.left_out) == (head, ["three.patch"], {})
        assert [e.name for e, _ in replay.series] == ["fix.patch", "three.patch"]
        assert run(replay.repo, "show", "HEAD:pkg/other/thing.py") == "X = 3"
        assert run(replay.repo, "show", "HEAD:pkg/sub/mod.py") == "VALUE = 2"
        assert run(replay.repo, "rev-list", "--count", f"{head}..HEAD") == "2"
    finally:
        replay.close()
    assert not replay.repo.exists()


def test_upstream_tests_are_proven_on_main_and_recorded(
    sandbox: Sandbox, capsys: pytest.CaptureFixture[str]
) -> None:
    _, head = _series(sandbox)
    assert main(["--root", str(sandbox.root), "verify", "--on", "main", "--record", *PY]) == 0
    out = capsys.readouterr().out
    assert out.count("proven") == 2
    record = json.loads((sandbox.root / "docs/upstream-tests-main.json").read_text())
    up = record["upstreams"]["Up"]
    assert (record["ref"], up["commit"], up["ported"], up["left_out"]) == (
        "main",
        head,
        ["three.patch"],
        {},
    )
    three = up["patches"]["three.patch"]
    assert (three["with_fix"], three["without_fix"], three["verdict"]) == (
        "passed",
        "failed",
        "proven",
    )
    assert three["port_sha256"] and not up["patches"]["fix.patch"]["port_sha256"]
    assert run(sandbox.root / "3rdparty/Up", "status", "--porcelain") == ""


def test_a_patch_main_already_carries_is_left_out_as_upstreamed(
    sandbox: Sandbox, capsys: pytest.CaptureFixture[str]
) -> None:
    _series(sandbox, main_has_the_fix=True)
    assert main(["--root", str(sandbox.root), "verify", "--on", "main", *PY]) == 1
    out = capsys.readouterr().out
    assert "fix.patch left out: already on main: the patch reverse-applies there" in out
    assert "retire it as upstreamed" in out
    assert out.count("proven") == 1  # three.patch, from its port
