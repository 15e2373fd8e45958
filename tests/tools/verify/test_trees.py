"""Left-out trees start from the series tree's bytecode, and never run it for a file they
changed: the bytecode is checked against its source's hash, not its mtime and size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tools.patchtool.model.series import parse_patch
from tools.patchtool.verify.trees import compile_tree, reversed_tree


def _git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@e", GIT_COMMITTER_NAME="t")
    env["GIT_COMMITTER_EMAIL"] = "t@e"
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _value(tree: Path) -> str:
    probe = "import pkg.mod; print(pkg.mod.VALUE)"
    done = subprocess.run([sys.executable, "-B", "-c", probe], cwd=tree, capture_output=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


def test_a_left_out_tree_shares_the_bytecode_but_not_for_what_it_reversed(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "mod.py").write_text("VALUE = 1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    (repo / "pkg" / "mod.py").write_text("VALUE = 2\n")
    _git(repo, "commit", "-qam", "Fix")
    patch = parse_patch(repo / _git(repo, "format-patch", "-1", "HEAD").strip())

    series = tmp_path / "series"
    _git(repo, "worktree", "add", "-q", str(series))
    compile_tree(Path(sys.executable), series)
    assert _value(series) == "2"
    dest = reversed_tree(series, [patch], tmp_path / "left-out")
    # Same size and mtime as the series' source: only the hash tells the bytecode is stale.
    stat = (series / "pkg" / "mod.py").stat()
    os.utime(dest / "pkg" / "mod.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert _value(dest) == "1"

    shared = [p.name for p in (dest / "pkg" / "__pycache__").iterdir()]
    assert any(name.startswith("__init__.") for name in shared), shared
    init = next((dest / "pkg" / "__pycache__").glob("__init__.*.pyc"))
    assert init.stat().st_ino == (series / "pkg" / "__pycache__" / init.name).stat().st_ino
