"""The status page's upstream PRs column: `report --prs-from UPSTREAM=GITDIR` (or --measure
with PR refs in the checkout) fills it; offline regeneration keeps it (tests/tools/prs/upstream.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tools.prs.upstream import build
from tools.patchtool.cli import main

pytestmark = pytest.mark.usefixtures("isolated_git")


def test_prs_column_filled_and_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = build(tmp_path)
    checkout = root / "3rdparty/Up"
    assert main(["--root", str(root), "report"]) == 0
    assert "| feeder branch | upstream PRs |" in (root / "docs/patches.md").read_text()
    assert main(["--root", str(root), "report", "--prs-from", f"Up={checkout}"]) == 0
    m = json.loads((root / "docs/patches.json").read_text())["patches"][0]["measurement"]
    # #6 counts as a conflict here (the page lists PRs up to 300 files); #5 is closed: left out
    assert m["upstream_prs"] == (
        "same-fix #1 open?; conflicts #7 open?; conflicts #6 open? (+1 more)"
    )
    page = (root / "docs/patches.md").read_text()
    assert (
        f"same-fix #1 open?; conflicts #7 open?; conflicts #6 open? (+1 more) ({m['upstream_prs_measured']})"
        in page
    )
    assert main(["--root", str(root), "report", "--check"]) == 0
    assert main(["--root", str(root), "report", "--prs-from", "Up"]) == 1
    assert "--prs-from Up: give it as UPSTREAM=GITDIR" in capsys.readouterr().err
