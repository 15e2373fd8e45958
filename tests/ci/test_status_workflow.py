"""The nightly status-page workflow (.github/workflows/status.yml), checked without a runner:
it parses, its scripts are bash without `${{ }}` inside, it clones our manifest's URLs with
every branch (the feeder branch the page measures), and its `tools/patches` calls are accepted
by the real CLI with the flags that measure the whole page."""

from __future__ import annotations

import shlex
from pathlib import Path

from tests.ci.workflows import (
    ROOT,
    assert_run_scripts_are_bash,
    job_steps,
    run_with_recording_git,
)
from tools.patchtool.cli import build_parser
from tools.patchtool.model.manifest import load_manifest

STEPS = job_steps("status.yml", "status")


def _script(name_part: str) -> str:
    return str(next(s for s in STEPS if name_part in str(s.get("name", "")))["run"])


def test_scripts_are_bash_without_expressions() -> None:
    assert_run_scripts_are_bash(STEPS)
    assert all("${{" not in str(s["run"]) for s in STEPS if "run" in s)


def test_history_step_clones_every_branch_of_our_manifest_urls(tmp_path: Path) -> None:
    calls = run_with_recording_git(_script("Full histories"), tmp_path)
    urls = {up.name: up.url for up in load_manifest(ROOT).upstreams.values()}
    pulls = "fetch --quiet origin +refs/pull/*/head:refs/pull/*/head +refs/pull/*/merge:refs/pull/*/merge"
    assert calls == [  # a bare clone keeps every branch, dev included; then the PR refs
        call
        for n, url in urls.items()
        for call in (
            f"clone --quiet --bare {url} {tmp_path}/upstreams/{n}.git",
            f"-C {tmp_path}/upstreams/{n}.git {pulls}",
        )
    ]
    assert any(up.feeder for up in load_manifest(ROOT).upstreams.values())


def test_the_report_calls_measure_the_whole_page_and_check_it() -> None:
    calls = [
        shlex.split(line.replace("$RUNNER_TEMP", "/tmp").replace("$up", "/tmp/upstreams"))[1:]
        for line in _script("Measure the page").splitlines()
        if line.strip().startswith("tools/patches ")
    ]
    assert [c[:2] for c in calls] == [["report", "--measure"], ["report", "--check"]]
    measure, check = (build_parser(c).parse_args(c) for c in calls)
    assert measure.measure and measure.tripwires and measure.mirror_dir == "/tmp/upstreams"
    assert measure.prs_from == [  # the upstream PRs column, from the fetched refs/pull/*
        f"{n}=/tmp/upstreams/{n}.git" for n in load_manifest(ROOT).upstreams
    ]
    assert check.check and check.mirror_dir == "/tmp/upstreams"
