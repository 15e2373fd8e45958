"""`open-pr` against upstream PRs: it stops on an open same-fix PR, naming it, unless
--despite-pr; the PR body names the open PRs on the patch's lines (tests/tools/prs/upstream.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.prs.upstream import build
from tools.patchtool.cli import main

pytestmark = pytest.mark.usefixtures("isolated_git")
PATCH = "patches/Up/fix-line-20.patch"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "isolated.gitconfig").write_text(
        "[user]\n\tname = Ada\n\temail = ada@example.org\n"
    )
    return build(tmp_path)[0]


def test_open_pr_refuses_on_an_open_same_fix_pr(root: Path, capsys) -> None:
    assert main(["--root", str(root), "open-pr", PATCH, "--onto", "v1"]) == 1
    err = capsys.readouterr().err
    assert "open upstream PR #1 makes the same fix as fix-line-20.patch" in err
    assert "--despite-pr 1" in err


def test_despite_pr_goes_on_and_names_related_prs(root: Path, capsys) -> None:
    assert main(["--root", str(root), "open-pr", PATCH, "--onto", "v1", "--despite-pr", "1"]) == 0
    out = capsys.readouterr().out
    body = Path(next(x for x in out.splitlines() if x.startswith("body:")).split()[1]).read_text()
    assert "Related open upstream PRs on the same lines:" in body
    assert "- #1 (same-fix, open? (merge ref))" in body
    assert "- #2 (conflicts, open? (merge ref))" in body
    assert "#3 " not in body and "#5 " not in body  # nearby, closed: not named
    assert "- #7 (conflicts, open? (merge ref))" in body  # aimed at the feeder
    assert "note: checked 8 upstream PRs; 4 open on its lines" in out  # 1, 2, 6, 7


def test_without_pr_refs_it_only_notes_it(root: Path, capsys) -> None:
    from tests.tools.repos import run

    checkout = root / "3rdparty/Up"
    for ref in run(["for-each-ref", "--format=%(refname)", "refs/pull/"], checkout).split():
        run(["update-ref", "-d", ref], checkout)
    assert main(["--root", str(root), "open-pr", PATCH, "--onto", "v1"]) == 0
    assert "note: upstream PRs not checked" in capsys.readouterr().out
