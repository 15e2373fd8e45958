"""upstream_check/copyright.py: a Python file a patch adds carries the upstream's header."""

from __future__ import annotations

import json

import pytest

from tests.tools.sandbox import TRAILERS, Sandbox
from tools.patchtool.apply.apply import apply_upstream
from tools.patchtool.cli import main
from tools.patchtool.model.manifest import load_manifest
from tools.patchtool.upstream_check.config import COPYRIGHT_RULES
from tools.patchtool.upstream_check.copyright import copyright_findings, header_problem

APACHE = """# Copyright (c) 2025, NVIDIA CORPORATION.  All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
"""
MCORE = "# Copyright (c) 2026 NVIDIA CORPORATION & AFFILIATES. All rights reserved.\n"


@pytest.mark.parametrize(
    ("upstream", "text", "problem"),
    [
        ("Megatron-LM", MCORE + "x = 1\n", ""),
        ("Megatron-LM", "# Copyright (c) 2024, NVIDIA CORPORATION. All rights reserved.\n", ""),
        ("Megatron-LM", "#!/usr/bin/env python3\n" + MCORE, ""),
        (
            "Megatron-LM",
            "# Copyright (c) 2026, NVIDIA CORPORATION.\nx = 1\n",
            "no copyright header",
        ),
        ("Megatron-LM", "import os\n" + MCORE, "no copyright header"),
        ("NeMo-RL", APACHE + "x = 1\n", ""),
        (
            "NeMo-RL",
            APACHE.replace("2025,", "2024-2026,").replace("  All rights reserved.", ""),
            "",
        ),
        ("NeMo-RL", MCORE + "x = 1\n", "no copyright header"),
        ("NeMo-RL", APACHE.split("\n")[0] + "\nx = 1\n", "copyright line without the license text"),
        ("Megatron-Bridge", "#!/usr/bin/env python3\n" + APACHE, ""),
    ],
)
def test_header_as_the_upstream_files_carry_it(upstream: str, text: str, problem: str) -> None:
    assert header_problem(COPYRIGHT_RULES[upstream], text.encode()) == problem


def test_finding_names_the_file_and_the_expected_first_line() -> None:
    rule = COPYRIGHT_RULES["Megatron-LM"]
    (finding,) = copyright_findings(rule, "megatron/core/new.py", b"x = 1\n", "2026")
    assert (finding.check, finding.file, finding.line) == ("copyright", "megatron/core/new.py", 1)
    assert finding.message == (
        "new file has no copyright header; its first line should be "
        "`# Copyright (c) 2026 NVIDIA CORPORATION & AFFILIATES. All rights reserved.`"
    )
    assert copyright_findings(rule, "pkg/__init__.py", b"", "2026") == []  # empty: exempt
    assert copyright_findings(rule, "README.md", b"text\n", "2026") == []  # Python files only
    (apache,) = copyright_findings(COPYRIGHT_RULES["NeMo-RL"], "a.py", b"x = 1\n", "2026")
    assert (
        "`# Copyright (c) 2026, NVIDIA CORPORATION.  All rights reserved.`, then the license text"
        in apache.message
    )


def test_upstream_check_reports_new_files_without_the_header(
    sandbox: Sandbox, capsys: pytest.CaptureFixture[str]
) -> None:
    """A NeMo-RL series: a new file without the header fails, one with it, an empty new
    file and a changed file without one (its header is upstream's business) do not."""
    repo, pin = sandbox.upstream("NeMo-RL", {"nemo_rl/old.py": "x = 1\n"})
    change = {
        "nemo_rl/old.py": "x = 2\n",
        "nemo_rl/new.py": "y = 1\n",
        "nemo_rl/ok.py": APACHE + "z = 1\n",
        "tests/unit/__init__.py": "",
        "tests/unit/test_new.py": "def test_y():\n    pass\n",
    }
    sandbox.add("NeMo-RL", str(repo), pin)
    sandbox.set_series(
        "NeMo-RL", {"p1.patch": sandbox.make_patch(repo, pin, change, "Fix", TRAILERS)}
    )
    sandbox.commit()
    assert (
        apply_upstream(sandbox.root, load_manifest(sandbox.root).upstreams["NeMo-RL"]).state
        == "applied"
    )
    capsys.readouterr()
    cli = ["--root", str(sandbox.root), "upstream-check", "NeMo-RL"]
    assert main([*cli, "--json", "--allow-missing"]) == 1
    (report,) = json.loads(capsys.readouterr().out)["upstreams"]
    (patch,) = report["patches"]
    assert "copyright" in patch["ran"]
    found = sorted((f["file"], f["line"]) for f in patch["findings"] if f["check"] == "copyright")
    assert found == [("nemo_rl/new.py", 1), ("tests/unit/test_new.py", 1)]
    assert report["copyright"].startswith("new .py files start `# Copyright (c) <year>, NVIDIA")
    assert main([*cli, "--allow-missing"]) == 1
    out = capsys.readouterr().out
    assert "  copyright: new .py files start" in out
    assert (
        "    nemo_rl/new.py:1: copyright: new file has no copyright header; its first line should be `# Copyright (c) 20"
        in out
    )
