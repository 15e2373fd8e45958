"""A target beside the pin (a release tag cut from a branch that lacks pin commits): `rebase`
says so before the per-patch table, since conflicts may come from the missing commits."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.rebase.scenario import MOD, fixed
from tests.tools.repos import commit, make_patch, make_superproject, numbered, run, trailers
from tools.patchtool.cli import main

pytestmark = pytest.mark.usefixtures("isolated_git")


def test_target_lacking_pin_commits_is_named(
    tmp_path: Path, upstream: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    commit(upstream, "main moves on", {"pkg/other.py": numbered(3, "other")})
    run(["tag", "p1"], upstream)  # the pin: one commit past v1 on main
    fix = make_patch(upstream, "p1", {MOD: fixed(numbered(40), 5, "patched 6")}, "fix", trailers())
    run(["checkout", "-q", "-b", "release", "v1"], upstream)
    commit(upstream, "release fix", {MOD: fixed(numbered(40), 30, "release 31")})
    run(["tag", "r1"], upstream)
    run(["checkout", "-q", "main"], upstream)
    commit(upstream, "main again", {"pkg/third.py": ["x"]})
    run(["tag", "p2"], upstream)
    root = make_superproject(tmp_path / "super", upstream, patches=[("fix.patch", fix)], tag="p1")
    report = ["--report", str(tmp_path / "report.md")]  # not next to a temp scratch dir
    assert main(["--root", str(root), "rebase", "Up", "--to", "r1", "--dry-run", *report]) == 0
    out = capsys.readouterr().out.splitlines()
    note = "note: r1 lacks 1 commits of the pin; conflicts below may come from those"
    assert note in out and out.index(note) < next(i for i, x in enumerate(out) if "fix.patch" in x)
    assert "- r1 lacks 1 commits of the pin" in (tmp_path / "report.md").read_text()
    assert main(["--root", str(root), "rebase", "Up", "--to", "p2", "--dry-run", *report]) == 0
    assert "lacks" not in capsys.readouterr().out  # a descendant of the pin lacks nothing
