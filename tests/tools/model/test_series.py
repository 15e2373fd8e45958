"""model/series.py on what `quilt refresh` writes: accepted on input, normalised by export.

`quilt refresh` keeps the mbox header but rewrites the diff (`Index:`/`====`, `--- up.orig/x`
/`+++ up/x` or with `-p ab` `a/ b/` prefixes, no `diff --git`/`index` lines). Such a patch
parses and applies (git am takes it); lint names the one command that restores the
canonical bytes, and `export` writes them. One test uses the real quilt when installed; the
other a quilt-format fixture built by hand (the exact layout quilt 0.66 writes), so CI without
quilt still covers it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.tools.repos import (
    init_repo,
    make_patch,
    make_superproject,
    numbered,
    trailers,
)
from tools.patchtool.cli import main
from tools.patchtool.lint.lint import lint_all
from tools.patchtool.model.manifest import load_manifest
from tools.patchtool.model.series import parse_patch

pytestmark = pytest.mark.usefixtures("isolated_git")

MOD = "pkg/mod.py"


def project(tmp_path: Path) -> tuple[Path, bytes]:
    upstream = tmp_path / "upstream"
    init_repo(upstream, {MOD: numbered(20)})
    lines = numbered(20)
    lines[4] = "patched 5"
    patch = make_patch(upstream, "v1", {MOD: lines}, "fix five", trailers())
    (tmp_path / "super").mkdir()
    root = make_superproject(tmp_path / "super" / "r", upstream, patches=[("fix.patch", patch)])
    (root / "tests").mkdir()
    (root / "tests/test_x.py").write_text("def test_fix():\n    pass\n")
    return root, patch


def quilt_by_hand(patch: bytes, second: str = "patched 9") -> bytes:
    """What quilt 0.66 `refresh` wrote for this patch after line 9 was edited too (by hand)."""
    head = patch.decode().split("\ndiff --git ", 1)[0]
    diff = (
        "\nIndex: Up/pkg/mod.py\n"
        + "=" * 67
        + "\n--- Up.orig/pkg/mod.py\n+++ Up/pkg/mod.py\n@@ -2,11 +2,11 @@ line 1\n"
        " line 2\n line 3\n line 4\n-line 5\n+patched 5\n line 6\n line 7\n line 8\n"
        f"-line 9\n+{second}\n line 10\n line 11\n line 12\n"
    )
    return (head + diff).encode()


def canonical_after_export(root: Path) -> bytes:
    """`apply` + `export` (the one command lint prints) and the lint verdict after it."""
    assert main(["--root", str(root), "apply", "Up"]) == 0
    assert main(["--root", str(root), "export", "Up"]) == 0
    data = (root / "patches/Up/fix.patch").read_bytes()
    assert lint_all(root, load_manifest(root)) == []
    assert main(["--root", str(root), "export", "--check", "Up"]) == 0
    return data


def test_quilt_format_is_read_applied_and_normalised(tmp_path: Path) -> None:
    """Issue 18 defect 9 (hand-built quilt fixture): lint errors, apply refused it."""
    root, patch = project(tmp_path)
    path = root / "patches/Up/fix.patch"
    path.write_bytes(quilt_by_hand(patch))
    parsed = parse_patch(path)
    assert parsed.problems == []
    assert [f.path for f in parsed.files] == [MOD] and parsed.quilt_line > 0
    assert [t.key for t in parsed.trailers] == ["Upstream-Status", "Origin", "Test"]
    errors = [str(e) for e in lint_all(root, load_manifest(root))]
    assert len(errors) == 1, errors  # one finding, no spurious missing trailers
    assert "quilt" in errors[0]
    assert errors[0].endswith("run: tools/patches apply Up && tools/patches export Up")
    data = canonical_after_export(root)
    assert b"diff --git a/pkg/mod.py b/pkg/mod.py\nindex " in data
    assert b"Index:" not in data and b"+patched 9" in data
    assert b"Subject: fix five" in data and b"Test: tests/test_x.py::test_fix" in data


@pytest.mark.skipif(shutil.which("quilt") is None, reason="quilt is not installed")
def test_real_quilt_push_refresh_pop_round_trip(tmp_path: Path) -> None:
    """The README workflow with the real quilt: push, edit, refresh, pop, then normalise."""
    root, _patch = project(tmp_path)
    checkout = root / "3rdparty/Up"
    env = {**os.environ, "QUILT_PATCHES": str(root / "patches/Up")}
    quilt = lambda *a: subprocess.run(  # noqa: E731
        ["quilt", *a], cwd=checkout, env=env, check=True, capture_output=True
    )
    quilt("push", "-a")
    text = (checkout / MOD).read_text().replace("line 9\n", "patched 9\n")
    (checkout / MOD).write_text(text)
    quilt("refresh")
    quilt("pop", "-a")
    shutil.rmtree(checkout / ".pc")
    assert b"diff --git" not in (root / "patches/Up/fix.patch").read_bytes()  # quilt's format
    data = canonical_after_export(root)
    assert b"diff --git a/pkg/mod.py b/pkg/mod.py\nindex " in data and b"+patched 9" in data
