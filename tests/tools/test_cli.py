"""cli.py and the layout it relies on: lazy command registry, commands never import commands."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tools.patchtool.cli import COMMANDS, load

PACKAGE = Path(__file__).resolve().parents[2] / "tools" / "patchtool"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_lives_in_commands_verb(name: str) -> None:
    module, _ = COMMANDS[name]
    assert module == name.replace("-", "_")
    assert (PACKAGE / "commands" / f"{module}.py").is_file()
    assert load(name).name == name


def test_no_command_module_imports_another() -> None:
    for path in sorted((PACKAGE / "commands").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                target = "." * node.level + (node.module or "")
                assert not target.startswith((".commands", "..commands")), (path.name, target)
                assert node.level != 1, (path.name, target)


def test_running_a_command_imports_only_its_own_module(tmp_path: Path) -> None:
    probe = (
        "import sys; sys.path.insert(0, 'tools'); sys.argv = ['x', 'lint', '--help']\n"
        "from patchtool import cli\n"
        "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('patchtool.commands.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=PACKAGE.parents[1],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip().splitlines()[-1] == "['patchtool.commands.lint']"


def test_tools_use_only_the_standard_library() -> None:
    allowed = set(sys.stdlib_module_names) | {"patchtool"}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, (path, name)
