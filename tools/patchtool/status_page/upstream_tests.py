"""The status page's upstream-test section: each patch's upstream-native test and the
regression gate's figures, as `verify --record` measured them (docs/upstream-tests.json).

Why read from the record: the suites take minutes to run; the page is regenerated and checked
in seconds. The record keeps each patch file's sha256; a row whose patch changed since says so instead of
showing stale figures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..core.test_suites import RECORD_PATH

INTRO = """## Upstream tests and the regression gate

Each patch carries an upstream-native test (`Upstream-Test:`) in the upstream's own test tree:
the test its PR shows. `tools/patches verify` proves it from the upstream tree under the
upstream's own pytest configuration (it passes on the series and fails with the patch's source
change left out), and runs the upstream's own tests of the directories each patch touches on
the tree before the series and on the series (the regression gate: a test that passed before
and not after fails verify). Figures from `tools/patches verify --record` ({record}); "not passing
before" counts tests that already fail or skip without the series, "causes" why tests do not
pass on the series (on this CPU machine; `needs ...` are skips by the CPU compatibility layer,
`integration/mcore_grpo/upstream_cpu.py`).
"""


def _load(root: Path) -> dict[str, Any]:
    path = root / RECORD_PATH
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return dict(data.get("upstreams", {}))


def _counts(gate: Any) -> list[str]:
    if not isinstance(gate, dict):
        return ["", "", "", "", "", ""]
    keys = ("run", "passed", "failing_before", "failing_after", "skipped", "broken")
    return [str(gate.get(k, "")) for k in keys]


def _causes(gate: Any, top: int = 4) -> str:
    if not isinstance(gate, dict) or not gate.get("causes"):
        return ""
    causes = dict(gate["causes"])
    shown = [f"{why} ({n})" for why, n in list(causes.items())[:top]]
    rest = sum(causes.values()) - sum(list(causes.values())[:top])
    text = "; ".join(shown) + (f"; other ({rest})" if rest else "")
    return text.replace("|", "\\|")


def section(root: Path, patches: list[tuple[str, str, str]]) -> list[str]:
    """Markdown lines for the page: per upstream its gate, per patch (upstream, name, sha256 of
    the file) its test."""
    record = _load(root)
    out = [INTRO.format(record=RECORD_PATH.as_posix()), ""]
    if not record:
        return [*out, "Not recorded yet: run `tools/patches verify --record`.", ""]
    out += [
        "| upstream | before the series | test dirs | run | pass | not passing before | failing after "
        "| skipped | broken | causes on the series |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, up in record.items():
        cells = [
            name,
            str(up.get("baseline", "")).replace("|", "\\|"),
            str(len(up.get("gate_dirs", []))),
        ]
        out.append(
            "| " + " | ".join([*cells, *_counts(up.get("gate")), _causes(up.get("gate"))]) + " |"
        )
    deferred = [
        f"- {name} `{d}`: {why}"
        for name, up in record.items()
        for d, why in dict(up.get("deferred", {})).items()
    ]
    if deferred:
        out += [
            "",
            "Touched, not gated by every verify (`tools/patches verify --full-gate` runs them):",
        ]
        out += deferred
    out += [
        "",
        "| upstream | patch | upstream test | verdict | gate dirs | run | pass | not passing before "
        "| failing after | skipped | broken |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for upstream, name, sha in patches:
        entry = dict(record.get(upstream, {}).get("patches", {})).get(name)
        if not isinstance(entry, dict) or entry.get("sha256") != sha:
            why = "not recorded" if not isinstance(entry, dict) else "patch changed since recorded"
            out.append(f"| {upstream} | `{name}` | {why} | | | | | | | | |")
            continue
        tests = "<br>".join(f"`{t}`" for t in entry.get("upstream_tests", [])) or "none"
        dirs = (
            "<br>".join(
                [f"`{d}`" for d in entry.get("gate_dirs", [])]
                + [f"`{d}` (deferred)" for d in entry.get("deferred_dirs", [])]
            )
            or "none"
        )
        cells = [upstream, f"`{name}`", tests, str(entry.get("verdict", "")), dirs]
        out.append("| " + " | ".join([*cells, *_counts(entry.get("gate"))]) + " |")
    return [*out, ""]
