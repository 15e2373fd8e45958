"""Which checks an upstream runs: its pre-commit hooks (or a recorded copy for a stand-in).

Only the hooks upstream-check can run are kept (`ruff`, `ruff-format`, `black`, `isort`, the
whitespace hooks); the others are listed as not run. On a stand-in without the hooks file, a
recorded copy (standin_hooks/) is used only when the stand-in's pyproject.toml agrees with it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from ..errors import PatchToolError
from ..model.manifest import Upstream
from ..source.detect import STANDIN, Source
from .model import (
    BLACK,
    END_OF_FILE,
    HOOKS_FILE,
    ISORT,
    RUFF,
    RUFF_FORMAT,
    TRAILING_WS,
    Check,
    CopyrightRule,
)
from .precommit import Hook, read_hooks, tag_version

_FIX_ARGS = {"--fix", "--exit-non-zero-on-fix", "--unsafe-fixes", "--show-fixes", "--no-fix"}

# Release archives drop `.pre-commit-config.yaml` (and CONTRIBUTING.md). For Megatron-LM's sdist
# stand-in, standin_hooks/Megatron-LM.pre-commit-config.yaml holds the hooks of that file, copied
# unchanged from core_v0.16.1 (55ac7082) and identical at core_v0.19.0 (5be96267); used only on a
# stand-in, labelled as such, and only when the stand-in's own pyproject.toml agrees (black
# `required_version`, an [tool.isort] table).
STANDIN_HOOKS_DIR = Path(__file__).with_name("standin_hooks")
# upstream -> what its recorded hooks file (standin_hooks/<upstream>.pre-commit-config.yaml) is.
STANDIN_HOOKS: dict[str, str] = {
    "Megatron-LM": (
        "recorded copy of Megatron-LM's .pre-commit-config.yaml (core_v0.16.1, core_v0.19.0)"
    ),
}

# The copyright header each upstream wants on a NEW Python file (a file a patch changes keeps
# its own). Their CI checks it with NVIDIA-NeMo/FW-CI-templates (.github/workflows/
# copyright-check.yml): Megatron-LM (v1.0.0) runs its copyright-checker (v0.66.7) on the PR's
# changed .py files, wanting a `# Copyright` line among the leading comments and suggesting
# Megatron-LM's `expected`; Megatron-Bridge and NeMo-RL (v0.2.0) want `Copyright.*NVIDIA
# CORPORATION` or an Apache license line in the first 10 lines of every .py file but
# `__init__.py`, tests included. The rule below is stricter where the upstream's files are: it
# is the header they carry at the pins (the first line after a `#!`/coding line of the non-empty
# tracked .py files, 2026-08) and where the upstream states it; `first_line` accepts every form
# the upstream already has, so a header it would take is never reported.
_APACHE = '# Licensed under the Apache License, Version 2.0 (the "License");'
_NVIDIA_APACHE = (
    r"^# Copyright \(c\) \d{4}(-\d{4})?, NVIDIA CORPORATION\.( +All rights reserved\.)?\s*$"
)
COPYRIGHT_RULES: dict[str, CopyrightRule] = {
    "Megatron-LM": CopyrightRule(
        # FW-CI-templates' copyright-checker: first line ~ `Copyright.*NVIDIA CORPORATION.*All
        # rights reserved\.`, suggesting exactly `expected` (1,180 of 1,251 files match; the
        # files added in 2025-2026 mostly in this form).
        first_line=r"^#.*Copyright.*NVIDIA CORPORATION.*All rights reserved\.",
        expected="# Copyright (c) {year} NVIDIA CORPORATION & AFFILIATES. All rights reserved.",
        source="Megatron-LM's files (1,180 of 1,251 .py) and FW-CI-templates' copyright-checker",
    ),
    "Megatron-Bridge": CopyrightRule(
        first_line=_NVIDIA_APACHE,
        expected="# Copyright (c) {year}, NVIDIA CORPORATION.  All rights reserved.",
        then=_APACHE,
        source="skills/linting-and-formatting/SKILL.md (NVIDIA header + Apache-2.0 text) and "
        "Megatron-Bridge's files (1,511 of 1,627 .py)",
    ),
    "NeMo-RL": CopyrightRule(
        first_line=_NVIDIA_APACHE,
        expected="# Copyright (c) {year}, NVIDIA CORPORATION.  All rights reserved.",
        then=_APACHE,
        source=".claude/skills/copyright/SKILL.md (NVIDIA header + Apache-2.0 text) and "
        "NeMo-RL's files (646 of 660 .py)",
    ),
}


# --- which checks -------------------------------------------------------------------------


def checks_from_hooks(hooks: list[Hook], where: str) -> tuple[list[Check], list[str]]:
    """The hooks this command runs, and `id (file:line)` of those it does not."""
    checks: list[Check] = []
    not_run: list[str] = []
    for hook in hooks:
        repo = hook.repo.lower().rstrip("/").removesuffix(".git")
        origin = f"{where}:{hook.line}"
        version = tag_version(hook.rev)
        args = tuple(a for a in hook.args if a not in _FIX_ARGS)
        common = {"files": hook.files, "exclude": hook.exclude, "types": hook.types}
        if repo.endswith("astral-sh/ruff-pre-commit") and hook.id in ("ruff", "ruff-check"):
            args = args[1:] if args[:1] == ("check",) else args
            checks.append(Check(RUFF, f"ruff=={version}", args, origin=origin, **common))
        elif repo.endswith("astral-sh/ruff-pre-commit") and hook.id == "ruff-format":
            args = args[1:] if args[:1] == ("format",) else args
            checks.append(Check(RUFF_FORMAT, f"ruff=={version}", args, origin=origin, **common))
        elif repo.endswith(("psf/black", "psf/black-pre-commit-mirror")) and hook.id == "black":
            checks.append(Check(BLACK, f"black=={version}", args, origin=origin, **common))
        elif repo.endswith("pycqa/isort") and hook.id == "isort":
            checks.append(Check(ISORT, f"isort=={version}", args, origin=origin, **common))
        elif repo.endswith("pre-commit/pre-commit-hooks") and hook.id in (TRAILING_WS, END_OF_FILE):
            checks.append(Check(hook.id, "", (), origin=origin, **common))
        else:
            not_run.append(f"{hook.id} ({origin})")
    return checks, not_run


def _pyproject(repo: Path) -> dict[str, object]:
    path = repo / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise PatchToolError(f"{path}: not valid TOML ({exc})") from exc


def _standin_disagrees(repo: Path, checks: list[Check]) -> str:
    """Why the recorded hooks do not fit this stand-in's pyproject.toml ('' if they do)."""
    tool = _pyproject(repo).get("tool", {})
    assert isinstance(tool, dict)
    for check in checks:
        if check.kind == BLACK:
            black = tool.get("black")
            if not isinstance(black, dict):
                return "the stand-in's pyproject.toml has no [tool.black]"
            wanted = str(black.get("required_version", ""))
            version = check.spec.split("==", 1)[1]
            if wanted and not (version == wanted or version.startswith(wanted + ".")):
                return f"pyproject.toml requires black {wanted}, the recorded hooks pin {version}"
        if check.kind == ISORT and not isinstance(tool.get("isort"), dict):
            return "the stand-in's pyproject.toml has no [tool.isort]"
    return ""


def load_checks(repo: Path, up: Upstream, source: Source) -> tuple[list[Check], list[str], str]:
    """(checks, hooks not run, why nothing can be checked or '') for the patched checkout."""
    hooks_path = repo / HOOKS_FILE
    if hooks_path.is_file():
        where = f"{up.path}/{HOOKS_FILE}"
        checks, not_run = checks_from_hooks(read_hooks(hooks_path.read_text("utf-8"), where), where)
        return checks, not_run, ""
    if source.kind != STANDIN:
        return [], [], f"{up.path} has no {HOOKS_FILE}: the upstream pins no formatter"
    if up.name not in STANDIN_HOOKS:
        return (
            [],
            [],
            (
                f"config not available on the stand-in ({source.detail} has no {HOOKS_FILE} and "
                "no formatter config): not checked"
            ),
        )
    where = STANDIN_HOOKS[up.name]
    text = (STANDIN_HOOKS_DIR / f"{up.name}.pre-commit-config.yaml").read_text(encoding="utf-8")
    checks, not_run = checks_from_hooks(read_hooks(text, where), where)
    why = _standin_disagrees(repo, checks)
    if why:
        return [], [], f"recorded hooks do not fit the stand-in ({why}): not checked"
    return checks, not_run, ""
