"""Reading this repository's GitHub workflows in tests: no runner here, so what is checked is
that a workflow parses and each `run:` script is valid bash."""

from __future__ import annotations

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
