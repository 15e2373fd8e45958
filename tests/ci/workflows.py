"""Reading this repository's GitHub workflows in tests: no runner here, so what is checked is
that a workflow parses and each `run:` script is valid bash."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def job_steps(workflow: str, job: str) -> list[dict[str, object]]:
    """The steps of `job` in `.github/workflows/<workflow>`."""
    data = yaml.safe_load((ROOT / ".github" / "workflows" / workflow).read_text(encoding="utf-8"))
    return data["jobs"][job]["steps"]


def assert_run_scripts_are_bash(steps: list[dict[str, object]]) -> None:
    """Every `run:` script parses as bash (`bash -n`), and there is at least one."""
    scripts = [str(step["run"]) for step in steps if "run" in step]
    assert scripts
    for script in scripts:
        subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def run_with_recording_git(script: str, tmp_path: Path) -> list[str]:
    """Run a workflow step's script with `git` recording its arguments instead of acting
    (`$RUNNER_TEMP` = `tmp_path`); the argument lines, in order."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "git.log"
    (bin_dir / "git").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (bin_dir / "git").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env["RUNNER_TEMP"] = str(tmp_path)
    proc = subprocess.run(
        ["bash", "-e", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return log.read_text().splitlines()
