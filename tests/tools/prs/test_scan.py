"""`tools/patches prs` on a synthetic upstream with one PR of each kind (upstream.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tools.prs.upstream import build
from tools.patchtool.cli import main

pytestmark = pytest.mark.usefixtures("isolated_git")


def scan(root: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    code = main(["--root", str(root), "prs", "Up", "--json", "--max-files", "4", *extra])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


@pytest.fixture
def scenario(tmp_path: Path) -> tuple[Path, Path]:
    return build(tmp_path)


def hits(data: dict) -> dict[int, dict]:
    (patch,) = data["patches"]
    return {h["number"]: h for h in patch["hits"]}


def test_verdicts_states_and_ranking(scenario, capsys) -> None:
    root, _ = scenario
    data = scan(root, capsys)
    found = hits(data)
    assert found[1]["verdict"] == "same-fix"
    assert found[1]["state"] == {
        "state": "open",
        "how": "merge ref",
        "sure": False,
        "in_pin": False,
    }
    assert found[2]["verdict"] == "conflicts"
    assert found[3]["verdict"] == "nearby"
    assert found[5]["state"]["state"] == "closed" and not found[5]["state"]["sure"]
    assert found[4]["state"] == {
        "state": "merged",
        "how": "(#4) on main",
        "sure": True,
        "in_pin": False,
    }
    assert found[7]["verdict"] == "conflicts" and found[7]["target"] == "dev"  # mapped from dev
    assert 8 not in found and data["in_pin"] == 1  # merged before the pin: left out
    assert 6 not in found and data["patches"][0]["giant"] == [6] and data["giant"] == 1
    order = [h["number"] for h in data["patches"][0]["hits"]]
    assert order[0] == 1 and order.index(2) < order.index(3)
    assert data["counts"] == {"same-fix": 1, "conflicts": 0, "nearby": 0}


def test_gh_json_makes_states_sure(scenario, capsys, tmp_path: Path) -> None:
    root, _ = scenario
    gh = tmp_path / "gh.json"
    gh.write_text(json.dumps([{"number": 1, "state": "CLOSED"}, {"number": 5, "state": "OPEN"}]))
    found = hits(scan(root, capsys, "--gh-json", str(gh)))
    assert found[1]["state"]["state"] == "closed" and found[1]["state"]["sure"]
    assert found[5]["state"] == {"state": "open", "how": "gh", "sure": True, "in_pin": False}


def test_warm_run_uses_the_cache(scenario, capsys) -> None:
    root, _ = scenario
    cold = scan(root, capsys)
    warm = scan(root, capsys)
    assert warm["cached"] == warm["heads"] - warm["in_pin"] and cold["cached"] == 0
    assert warm["patches"] == cold["patches"]


def test_text_output(scenario, capsys) -> None:
    root, _ = scenario
    assert main(["--root", str(root), "prs", "Up", "--max-files", "4"]) == 0
    out = capsys.readouterr().out
    assert "same-fix  #1      open? (merge ref), from main" in out
    assert "+ 1 PRs over 4 files on its files" in out
    assert "patches with a same-fix PR: 1" in out


def test_errors_name_the_fix(scenario, capsys, tmp_path: Path) -> None:
    root, up = scenario
    assert main(["--root", str(root), "prs", "Up", "--from", str(up / "nope")]) == 1
    assert "no such directory" in capsys.readouterr().err
    bare = tmp_path / "bare"
    from tests.tools.repos import run

    run(["clone", "-q", "--bare", str(up), str(bare)], tmp_path)
    assert main(["--root", str(root), "prs", "Up", "--from", str(bare)]) == 1
    assert "has no refs/pull/*/head; fetch them" in capsys.readouterr().err
    bad = tmp_path / "gh.json"
    bad.write_text("{")
    assert main(["--root", str(root), "prs", "Up", "--gh-json", str(bad)]) == 1
    assert "--gh-json" in capsys.readouterr().err
