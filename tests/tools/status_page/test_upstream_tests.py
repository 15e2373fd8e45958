"""The status page's upstream-test section: the "on main" column from
docs/upstream-tests-main.json (verify --on main --record), kept only for the proven bytes."""

from __future__ import annotations

import json
from pathlib import Path

from tools.patchtool.model.test_suites import MAIN_RECORD_PATH, RECORD_PATH
from tools.patchtool.status_page.upstream_tests import main_record_gaps, on_main, section

RECORD = {
    "Up": {
        "commit": "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
        "ported": ["b.patch"],
        "left_out": {"c.patch": "already on main: the patch reverse-applies there"},
        "patches": {
            "a.patch": {"sha256": "A", "port_sha256": "", "verdict": "proven"},
            "b.patch": {"sha256": "B", "port_sha256": "PB", "verdict": "proven"},
        },
    }
}


def test_the_cell_says_the_verdict_commit_and_port_for_the_same_bytes_only() -> None:
    assert on_main(RECORD, "Up", "a.patch", "A", "") == "proven (d98e8a64ddf3)"
    assert on_main(RECORD, "Up", "b.patch", "B", "PB") == "proven (d98e8a64ddf3, port)"
    assert on_main(RECORD, "Up", "b.patch", "B", "changed") == "patch changed since recorded"
    assert on_main(RECORD, "Up", "a.patch", "A2", "") == "patch changed since recorded"
    assert on_main(RECORD, "Up", "c.patch", "C", "") == "does not apply (d98e8a64ddf3)"
    assert on_main(RECORD, "Up", "d.patch", "D", "") == "not recorded"
    assert on_main({}, "Other", "a.patch", "A", "") == "not recorded"


def test_the_section_shows_the_column(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    pin = {"Up": {"patches": {"a.patch": {"sha256": "A", "verdict": "proven"}}}}
    (tmp_path / RECORD_PATH).write_text(json.dumps({"upstreams": pin}))
    (tmp_path / MAIN_RECORD_PATH).write_text(json.dumps({"ref": "main", "upstreams": RECORD}))
    text = "\n".join(section(tmp_path, [("Up", "a.patch", "A", ""), ("Up", "e.patch", "E", "")]))
    assert "| on main |" in text
    assert "| proven (d98e8a64ddf3) |" in text
    assert "| Up | `e.patch` | not recorded | | | | | | | | | not recorded |" in text


def test_gaps_name_an_upstream_proven_elsewhere_or_in_older_bytes(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches/upstream-tests.toml").write_text(
        '[Up]\ntests_root = "tests"\npackage = "pkg"\nbaseline = ""\ntimeout = 60\n'
    )
    (tmp_path / MAIN_RECORD_PATH).write_text(json.dumps({"ref": "main", "upstreams": RECORD}))
    head = RECORD["Up"]["commit"]
    rows = [("Up", "a.patch", "A", ""), ("Up", "b.patch", "B", "PB")]
    assert main_record_gaps(tmp_path, rows, {"Up": head}) == []
    assert main_record_gaps(tmp_path, rows, {"Up": "0" * 40}) == [
        "Up: proven on main d98e8a64ddf3, but its main is at 000000000000"
    ]
    changed = [("Up", "a.patch", "A2", ""), *rows[1:]]
    (gap,) = main_record_gaps(tmp_path, changed, {"Up": head})
    assert gap.startswith("Up: 1 of 2 patches not proven on main in their current bytes")
    assert main_record_gaps(tmp_path, changed, {"Other": head}) == []  # no suite to prove with
