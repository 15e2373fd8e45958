"""A pytest plugin: where the suite's time went, per test directory, after every run.

Why: CI's budget is spent by a few directories (multi-rank workers, Ray clusters, real
checkpoints); `--durations` names the slowest tests, this names the slowest areas, so a change
that makes one dearer shows in the log of the run that made it (docs/results/ci-rehearsals.md keeps the figures).
Loaded for every run by `-p tests.support.time_by_directory` in pyproject.toml's addopts.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

DEPTH = 3  # tests/<area>/<package>, e.g. tests/integration/worker
_seconds: defaultdict[str, float] = defaultdict(float)
_tests: defaultdict[str, set[str]] = defaultdict(set)


def directory_of(nodeid: str) -> str:
    """The test's directory, at most DEPTH levels deep (`tests/tools/verify`)."""
    parts = nodeid.split("::", 1)[0].split("/")[:-1]
    return "/".join(parts[:DEPTH]) or "."


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Every phase (setup, call, teardown) counts: fixtures are where much of the time is."""
    where = directory_of(report.nodeid)
    _seconds[where] += report.duration
    _tests[where].add(report.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    total = sum(_seconds.values())
    if not total:
        return
    terminalreporter.section("time by test directory (setup + call + teardown)")
    for where, seconds in sorted(_seconds.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(
            f"{seconds:8.1f} s {100 * seconds / total:5.1f} %  {len(_tests[where]):4d} tests  {where}"
        )
    terminalreporter.write_line(f"{total:8.1f} s in all")
