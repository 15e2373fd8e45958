"""The nightly roll workflow (.github/workflows/roll.yml), checked without a GitHub runner.

No runner and no network here, so the workflow itself never runs on these machines; what can
be checked is: it parses, each `run:` script is valid bash with no `${{ }}` expansion inside
(inputs reach scripts only through env, so they cannot inject shell), the history step clones
exactly our manifest's URLs, and every `tools/patches` invocation is accepted by the real CLI.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import yaml

from tests.ci.workflows import run_with_recording_git
from tools.patchtool.cli import build_parser
from tools.patchtool.model.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "roll.yml"


def _workflow() -> dict[object, object]:
    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _steps() -> list[dict[str, object]]:
    jobs = _workflow()["jobs"]
    assert isinstance(jobs, dict)
    return jobs["roll"]["steps"]


def _run_step(name_part: str) -> str:
    step = next(s for s in _steps() if name_part in str(s.get("name", "")))
    return str(step["run"])


def test_triggers_nightly_and_by_hand() -> None:
    triggers = _workflow().get(True) or _workflow().get("on")  # YAML 1.1 reads `on` as True
    assert isinstance(triggers, dict)
    assert triggers["schedule"][0]["cron"] == "30 4 * * *"
    assert "to_nemo_rl" in triggers["workflow_dispatch"]["inputs"]
    assert _workflow()["permissions"] == {"contents": "write", "pull-requests": "write"}


def test_each_script_is_bash_without_expressions() -> None:
    scripts = [str(s["run"]) for s in _steps() if "run" in s]
    assert len(scripts) == 3
    for script in scripts:
        assert "${{" not in script, "pass expressions through env:, never into the script"
        proc = subprocess.run(
            ["bash", "-n"], input=script, text=True, capture_output=True, check=False
        )
        assert proc.returncode == 0, proc.stderr


def test_checkout_keeps_the_history_the_status_page_needs() -> None:
    checkout = next(s for s in _steps() if str(s.get("uses", "")).startswith("actions/checkout"))
    assert checkout["with"] == {"fetch-depth": 0}


def test_history_step_clones_our_manifest_urls(tmp_path: Path) -> None:
    """Run the step's script with `git` recording its arguments instead of cloning."""
    calls = run_with_recording_git(_run_step("Full histories"), tmp_path)
    urls = {up.name: up.url for up in load_manifest(ROOT).upstreams.values()}
    assert calls == [
        f"clone --quiet --bare {url} {tmp_path}/upstreams/{n}.git" for n, url in urls.items()
    ]


def _tools_calls(script: str) -> list[list[str]]:
    calls = []
    for line in script.splitlines():
        words = shlex.split(line.replace('"${args[@]}"', "--mirror-dir X --open-pr"))
        if words and words[0] in ("tools/patches", "tools/apply_patches.sh"):
            command = words[1:] if words[0] == "tools/patches" else ["apply", *words[1:]]
            calls.append([w.replace("$RUNNER_TEMP", "/tmp") for w in command])
    return calls


def test_every_tools_call_is_accepted_by_the_cli() -> None:
    scripts = [str(s["run"]) for s in _steps() if "run" in s]
    calls = [call for script in scripts for call in _tools_calls(script)]
    assert [c[0] for c in calls] == ["apply", "roll"]
    for call in calls:
        build_parser(call).parse_args(call)  # argparse exits (SystemExit) on an unknown flag
    roll = build_parser(calls[1]).parse_args([*calls[1], "--to-nemo-rl", "abc"])
    assert roll.open_pr and roll.mirror_dir == "X" and not roll.no_tripwires
