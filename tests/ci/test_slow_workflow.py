"""The nightly slow-tier workflow (.github/workflows/slow.yml), checked without a runner.

No runner and no network here, so the workflow never runs on these machines; what can be
checked is: it parses, each `run:` script is valid bash, and it selects exactly the tests the
default run leaves out (the `slow` mark that pyproject.toml's addopts deselects).
"""

from __future__ import annotations

import shlex
import tomllib

from tests.ci.workflows import ROOT, assert_run_scripts_are_bash, job_steps


def _steps() -> list[dict[str, object]]:
    return job_steps("slow.yml", "slow")


def _mark_expression(args: list[str]) -> str:
    """The last `-m` expression in `args` (pytest keeps the last one given)."""
    marks = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "-m"]
    return marks[-1] if marks else ""


def test_every_run_script_is_valid_bash() -> None:
    assert_run_scripts_are_bash(_steps())


def test_the_nightly_runs_what_the_default_run_leaves_out() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    addopts = shlex.split(config["tool"]["pytest"]["ini_options"]["addopts"])
    script = next(str(s["run"]) for s in _steps() if "slow tier" in str(s.get("name", "")))
    command = shlex.split(script.split("pytest", 1)[1])
    assert _mark_expression(addopts) == "not slow"
    assert _mark_expression([*addopts, *command]) == "slow"
