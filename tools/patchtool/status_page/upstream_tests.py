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

from ..model.test_suites import MAIN_RECORD_PATH as MAIN_RECORD
from ..model.test_suites import RECORD_PATH, load_suites

INTRO = """## Upstream tests and the regression gate

Each patch carries an upstream-native test (`Upstream-Test:`) in the upstream's own test tree:
the test its PR shows. `tools/patches verify` proves it from the upstream tree under the
upstream's own pytest configuration (it passes on the series and fails with the patch's source
change left out), and runs the upstream's own tests of the directories each patch touches on
the tree before the series and on the series (the regression gate: a test that passed before
and not after fails verify). Figures from `tools/patches verify --record` ({record}); "not passing
before" counts tests that already fail or skip without the series, "causes" why tests do not
pass on the series (on this CPU machine; `needs ...` are skips by the CPU compatibility layer,
`integration/upstream_pytest/cpu.py`). "on main" is the same proof where the PR goes:
`tools/patches verify --on main --record` ({main_record}) replays the series on each
upstream's `main` (each patch's port where it has one, "port") and proves the patch's upstream
test there: it passes with the series and fails with the patch's change left out.
"""


def _load(root: Path, path: Path = RECORD_PATH) -> dict[str, Any]:
    full = root / path
    if not full.is_file():
        return {}
    data = json.loads(full.read_text(encoding="utf-8"))
    return dict(data.get("upstreams", {}))


def on_main(record: dict[str, Any], upstream: str, name: str, sha: str, port_sha: str) -> str:
    """The patch's upstream-test proof on main, while the patch and its port are the bytes
    that were proven ("" for neither recorded)."""
    up = dict(record.get(upstream, {}))
    if name in dict(up.get("left_out", {})):
        return f"does not apply ({str(up.get('commit', ''))[:12]})"
    entry = dict(up.get("patches", {})).get(name)
    if not isinstance(entry, dict):
        return "not recorded"
    if (entry.get("sha256"), entry.get("port_sha256", "")) != (sha, port_sha):
        return "patch changed since recorded"
    ported = ", port" if name in up.get("ported", []) else ""
    return f"{entry.get('verdict', '')} ({str(up.get('commit', ''))[:12]}{ported})"


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


def main_record_gaps(
    root: Path, rows: list[tuple[str, str, str, str]], heads: dict[str, str]
) -> list[str]:
    """Why the on-main proofs are not current for the upstreams whose `main` is at hand
    (upstream -> its commit) and that have an upstream suite to prove them with
    (patches/upstream-tests.toml): recorded on another commit, or a patch (or port) not proven
    in these bytes. One line per upstream; [] when current."""
    record = _load(root, MAIN_RECORD)
    suites = load_suites(root)
    gaps = []
    for upstream, head in heads.items():
        if upstream not in suites:
            continue
        mine = [r for r in rows if r[0] == upstream]
        commit = str(dict(record.get(upstream, {})).get("commit", ""))
        stale = [
            r[1] for r in mine if on_main(record, *r).startswith(("not recorded", "patch changed"))
        ]
        if mine and commit[:12] != head[:12]:
            gaps.append(
                f"{upstream}: proven on main {commit[:12] or 'never'}, but its main is at {head[:12]}"
            )
        elif stale:
            gaps.append(
                f"{upstream}: {len(stale)} of {len(mine)} patches not proven on main in their current bytes, e.g. {stale[0]}"
            )
    return gaps


def section(root: Path, patches: list[tuple[str, str, str, str]]) -> list[str]:
    """Markdown lines for the page: per upstream its gate, per patch (upstream, name, sha256 of
    the file and of its port) its test, on the pin and on main."""
    record = _load(root)
    main = _load(root, MAIN_RECORD)
    out = [INTRO.format(record=RECORD_PATH.as_posix(), main_record=MAIN_RECORD.as_posix()), ""]
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
        "| failing after | skipped | broken | on main |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for upstream, name, sha, port_sha in patches:
        entry = dict(record.get(upstream, {}).get("patches", {})).get(name)
        main_cell = on_main(main, upstream, name, sha, port_sha)
        if not isinstance(entry, dict) or entry.get("sha256") != sha:
            why = "not recorded" if not isinstance(entry, dict) else "patch changed since recorded"
            out.append(f"| {upstream} | `{name}` | {why} | | | | | | | | | {main_cell} |")
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
        out.append("| " + " | ".join([*cells, *_counts(entry.get("gate")), main_cell]) + " |")
    return [*out, ""]
