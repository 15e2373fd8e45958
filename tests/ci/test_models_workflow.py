"""The nightly model-matrix workflow (.github/workflows/models.yml), checked without a runner.

No runner and no network here, so the workflow never runs on these machines; what can be
checked is: it parses, each `run:` script is valid bash, and its matrix invocation is accepted
by the real CLI, against the committed page as the baseline.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from model_matrix.matrix import build_parser

from tests.ci.workflows import assert_run_scripts_are_bash, job_steps


def _steps() -> list[dict[str, object]]:
    return job_steps("models.yml", "models")


def test_every_run_script_is_valid_bash() -> None:
    assert_run_scripts_are_bash(_steps())


def test_the_matrix_invocation_is_accepted_by_the_cli() -> None:
    script = next(str(s["run"]) for s in _steps() if "whole matrix" in str(s.get("name", "")))
    command = shlex.split(script.split("model_matrix.matrix", 1)[1].replace("\\\n", " "))
    args = build_parser().parse_args(command)
    assert args.baseline == Path("docs/models.json") and not args.arch and not args.check
    assert args.json != Path("docs/models.json")  # the committed page is the baseline, not output
