"""Which checks an upstream runs: its pre-commit hooks (or a recorded copy for a stand-in).

Only the hooks upstream-check can run are kept (`ruff`, `ruff-format`, `black`, `isort`, the
whitespace hooks); the others are listed as not run. On a stand-in without the hooks file, a
recorded copy (standin_hooks/) is used only when the stand-in's pyproject.toml agrees with it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from ..core.manifest import Upstream
from ..errors import PatchToolError
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
