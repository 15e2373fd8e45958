"""`upstream-check`: would each patch pass the upstream's own formatters, linters and DCO rule?

A patch is PR-ready only if the upstream's CI accepts it. For every patch of a series this runs
the upstream's pre-commit formatters/linters (ruff, black, isort, whitespace hooks) at the
versions its `.pre-commit-config.yaml` pins, with its own configuration, on the files the patch
touches, as they are in the patch's commit on branch `patched`; plus the DCO rule (a
`Signed-off-by:` by the author) where the upstream's CONTRIBUTING.md asks for it.

Formatters run through `uv tool run --from <tool>==<version>` (PyPI only), reading the file on
stdin with `--stdin-filename`, from the checkout's root: the checkout's config files, excludes and
first-party detection apply, and nothing is written into the checkout. A finding the same file
already had before the patch (its parent commit) is reported as pre-existing and does not fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..command import DEFAULT_ROOT
from ..core.checkout import checkout_dir, dirty_files
from ..core.git import format_patch, git_bytes, git_ok, git_text, patch_id
from ..core.manifest import Upstream
from ..core.series import Patch, load_series
from ..errors import PatchToolError
from ..source.detect import MISSING, STANDIN, Source, detect_source
from ..upstream_check.precommit import Hook, read_hooks, tag_version

HOOKS_FILE = ".pre-commit-config.yaml"
CONTRIBUTING_FILES = ("CONTRIBUTING.md", "CONTRIBUTING.rst", ".github/CONTRIBUTING.md")
RUFF, RUFF_FORMAT, BLACK, ISORT = "ruff", "ruff-format", "black", "isort"
TRAILING_WS, END_OF_FILE = "trailing-whitespace", "end-of-file-fixer"
TOOL_TIMEOUT_S = 300.0
DIFF_LINES = 30

# Release archives drop `.pre-commit-config.yaml` (and CONTRIBUTING.md). For Megatron-LM's sdist
# stand-in these are the hooks of that file, copied unchanged from core_v0.16.1 (55ac7082) and
# identical at core_v0.19.0 (5be96267); used only on a stand-in, labelled as such, and only when
# the stand-in's own pyproject.toml agrees (black `required_version`, an [tool.isort] table).
STANDIN_HOOKS: dict[str, tuple[str, str]] = {
    "Megatron-LM": (
        "recorded copy of Megatron-LM's .pre-commit-config.yaml (core_v0.16.1, core_v0.19.0)",
        """repos:
- repo: https://github.com/psf/black
  rev: 'refs/tags/24.4.2:refs/tags/24.4.2'
  hooks:
  - id: black
    files: ^megatron/core/.*|^tests/unit_tests/.*
    args: ["--skip-magic-trailing-comma", "--skip-string-normalization"]
- repo: https://github.com/pycqa/pylint
  rev: v3.2.6
  hooks:
  - id: pylint
    files: ^megatron/core/.*
- repo: https://github.com/pycqa/isort
  rev: 5.13.2
  hooks:
  - id: isort
    files: ^megatron/core/.*
""",
    )
}
# Megatron-LM's CONTRIBUTING.md (core_v0.16.1, core_v0.19.0) does not ask for Signed-off-by.
STANDIN_SIGNOFF: dict[str, bool] = {"Megatron-LM": False}

_FIX_ARGS = {"--fix", "--exit-non-zero-on-fix", "--unsafe-fixes", "--show-fixes", "--no-fix"}
_PY_SUFFIXES = (".py", ".pyi")
_HUNK_RE = re.compile(r"^@@ -(\d+)")


@dataclass(frozen=True)
class Check:
    """One upstream hook this command can run: what, which tool version, on which files."""

    kind: str
    spec: str  # "ruff==0.9.9"; "" for the whitespace hooks, emulated here
    args: tuple[str, ...]
    files: str
    exclude: str
    types: tuple[str, ...]
    origin: str

    @property
    def label(self) -> str:
        tool = self.spec.replace("==", " ") if self.spec else "pre-commit-hooks, emulated"
        extra = f" {' '.join(self.args)}" if self.args and self.kind == RUFF else ""
        return f"{self.kind}{extra} ({tool})"

    def applies(self, path: str, data: bytes) -> bool:
        """Would pre-commit run this hook on `path` (its files/exclude/types filters)?"""
        if self.files and not re.search(self.files, path):
            return False
        if re.search(self.exclude, path):
            return False
        types = set(self.types) or ({"text"} if not self.spec else {"python", "pyi"})
        if types & {"python", "pyi"} and path.endswith(_PY_SUFFIXES):
            return True
        return "text" in types and b"\0" not in data


@dataclass
class Finding:
    """One problem in one file of one patch; `preexisting` ones were there before the patch."""

    check: str
    file: str
    line: int
    message: str
    preexisting: bool = False
    detail: str = ""


@dataclass
class PatchReport:
    patch: str
    files: list[str]
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)  # checks that applied to at least one file

    @property
    def new_findings(self) -> list[Finding]:
        return [f for f in self.findings if not f.preexisting]


@dataclass
class UpstreamReport:
    """`state`: checked | no-patches | not-checked | error."""

    name: str
    source: str
    state: str
    detail: str = ""
    checks: list[str] = field(default_factory=list)
    dco: str = ""
    not_run: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    patches: list[PatchReport] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def finding_count(self) -> int:
        return sum(len(p.new_findings) for p in self.patches)


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
    where, text = STANDIN_HOOKS[up.name]
    checks, not_run = checks_from_hooks(read_hooks(text, where), where)
    why = _standin_disagrees(repo, checks)
    if why:
        return [], [], f"recorded hooks do not fit the stand-in ({why}): not checked"
    return checks, not_run, ""


def signoff_rule(repo: Path, up: Upstream, source: Source) -> tuple[bool | None, str]:
    """(is a Signed-off-by required, why we think so); None: unknown here."""
    for name in CONTRIBUTING_FILES:
        path = repo / name
        if path.is_file():
            asks = "signed-off-by" in path.read_text("utf-8", errors="replace").lower()
            return asks, f"{name} {'asks' if asks else 'does not ask'} for Signed-off-by"
    if source.kind == STANDIN and up.name in STANDIN_SIGNOFF:
        asks = STANDIN_SIGNOFF[up.name]
        return (
            asks,
            f"recorded: {up.name}'s CONTRIBUTING.md {'asks' if asks else 'does not ask'} for Signed-off-by (the stand-in lacks it)",
        )
    if source.kind == STANDIN:
        return None, "CONTRIBUTING.md not available on the stand-in: DCO not checked"
    return False, "no CONTRIBUTING.md: the upstream states no DCO rule"


def dco_findings(patch: Patch, patch_file: str) -> list[Finding]:
    """DCO: a `Signed-off-by:` line in the message, by the author (what the DCO app checks)."""
    signoffs = [
        (num, text.split(":", 1)[1].strip())
        for num, text in patch.body
        if text.lower().startswith("signed-off-by:")
    ]
    line = patch.subject_line or 1
    if not signoffs:
        fix = "add `Signed-off-by: Name <email>` to the trailers (git commit -s) and re-export"
        return [Finding("dco", patch_file, line, f"no Signed-off-by line; {fix}")]
    emails = {m.lower() for _, v in signoffs for m in re.findall(r"<([^>]+)>", v)}
    if patch.author_email and patch.author_email.lower() not in emails:
        return [
            Finding(
                "dco",
                patch_file,
                signoffs[0][0],
                f"Signed-off-by is not by the author <{patch.author_email}>; "
                "the DCO check wants the author's own sign-off",
            )
        ]
    return []


# --- running the tools --------------------------------------------------------------------


def find_uv() -> str:
    """A uv that runs: $UV (set inside `uv run`), next to this Python, next to its base, PATH."""
    candidates = [
        os.environ.get("UV", ""),
        str(Path(sys.executable).parent / "uv"),
        str(Path(getattr(sys, "_base_executable", "") or sys.executable).parent / "uv"),
        shutil.which("uv") or "",
    ]
    for uv in candidates:
        if uv and Path(uv).is_file():
            proc = subprocess.run(
                [uv, "--version"], capture_output=True, cwd=DEFAULT_ROOT, check=False
            )
            if proc.returncode == 0:
                return uv
    raise PatchToolError(
        "uv not found (upstream-check runs the upstream's formatters with `uv tool run`): "
        "python3 -m pip install uv"
    )


class ToolRunner:
    """Runs one check on one file's content, from the checkout's root.

    `uv tool run --from <spec>` resolves each tool once (PyPI or uv's cache) and reports the
    bin directory of the environment it made; later runs call the tool there directly, which
    saves uv's ~0.3-0.6 s per call on a loaded machine.
    """

    def __init__(self, uv: str, checkout: Path) -> None:
        self.uv = uv
        self.checkout = checkout
        self._bin: dict[str, Path] = {}
        self._why: dict[str, str] = {}

    def _exec(self, cmd: list[str], data: bytes) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                cmd,
                cwd=self.checkout,
                input=data.decode("utf-8", errors="surrogateescape"),
                capture_output=True,
                text=True,
                errors="replace",
                timeout=TOOL_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise PatchToolError(f"{' '.join(cmd)} timed out after {TOOL_TIMEOUT_S:.0f} s") from exc

    def unavailable(self, spec: str) -> str:
        """'' if `spec` runs (fetched into uv's cache once), else why not."""
        if spec not in self._bin and spec not in self._why:
            command = spec.split("==", 1)[0]
            where = "import os, sys; print(os.path.dirname(sys.executable))"
            probe = [self.uv, "-q", "tool", "run", "--from", spec, "python", "-c", where]
            proc = self._exec(probe, b"")
            tool = Path(proc.stdout.strip()) / command
            if proc.returncode == 0 and tool.is_file():
                version = self._exec([str(tool), "--version"], b"")
                if version.returncode == 0:
                    self._bin[spec] = tool
                    return ""
                proc = version
            self._why[spec] = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return self._why.get(spec, "")

    def _tool(self, spec: str, argv: list[str], data: bytes) -> subprocess.CompletedProcess[str]:
        return self._exec([str(self._bin[spec]), *argv[1:]], data)

    def run(self, check: Check, path: str, data: bytes) -> list[tuple[int, str, str, str]]:
        """Findings as (line, message, detail, match key) of `check` on `data` named `path`."""
        if check.kind == TRAILING_WS:
            return _trailing_whitespace(data)
        if check.kind == END_OF_FILE:
            return _end_of_file(data)
        why = self.unavailable(check.spec)
        if why:
            raise PatchToolError(
                f"cannot run {check.spec} with `uv tool run` ({why}); it needs PyPI access "
                "(or uv's cache)"
            )
        runner = {RUFF: self._ruff, RUFF_FORMAT: self._ruff_format, BLACK: self._black}
        return runner.get(check.kind, self._isort)(check, path, data)

    def _ruff(self, check: Check, path: str, data: bytes) -> list[tuple[int, str, str, str]]:
        argv = ["ruff", "check", "--force-exclude", "--no-fix", "--output-format=json"]
        proc = self._tool(check.spec, [*argv, *check.args, "--stdin-filename", path, "-"], data)
        if proc.returncode not in (0, 1):
            raise _tool_error(check, path, proc)
        out: list[tuple[int, str, str, str]] = []
        for item in json.loads(proc.stdout or "[]"):
            message = f"{item.get('code') or 'error'} {item['message']}"
            out.append((int(item["location"]["row"]), message, "", message))
        return out

    def _ruff_format(self, check: Check, path: str, data: bytes) -> list[tuple[int, str, str, str]]:
        argv = ["ruff", "format", "--force-exclude", "--diff", *check.args]
        proc = self._tool(check.spec, [*argv, "--stdin-filename", path, "-"], data)
        if proc.returncode == 0:
            return []
        if proc.returncode == 1 and proc.stdout.strip():
            return [_diff_finding(proc.stdout, "would reformat (ruff format)")]
        if "pars" in proc.stderr.lower():
            return [(1, _last_line(proc.stderr), "", "parse error")]
        raise _tool_error(check, path, proc)

    def _black(self, check: Check, path: str, data: bytes) -> list[tuple[int, str, str, str]]:
        argv = ["black", "--check", "--diff", "-q", *check.args, "--stdin-filename", path, "-"]
        proc = self._tool(check.spec, argv, data)
        if proc.returncode == 0:
            return []
        if proc.returncode == 1 and proc.stdout.strip():
            return [_diff_finding(proc.stdout, "would reformat (black)")]
        if proc.returncode == 123:
            return [(1, _last_line(proc.stderr), "", "parse error")]
        raise _tool_error(check, path, proc)

    def _isort(self, check: Check, path: str, data: bytes) -> list[tuple[int, str, str, str]]:
        argv = ["isort", "--check-only", "--diff", *check.args, "--settings-path", "."]
        proc = self._tool(check.spec, [*argv, "--filename", path, "-"], data)
        if proc.returncode == 0 or "was skipped as it's listed in 'skip'" in proc.stderr:
            return []
        if "incorrectly sorted" in proc.stderr:
            return [_diff_finding(proc.stdout, "imports incorrectly sorted/formatted (isort)")]
        raise _tool_error(check, path, proc)


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "(no output)"


def _tool_error(check: Check, path: str, proc: subprocess.CompletedProcess[str]) -> PatchToolError:
    return PatchToolError(
        f"{check.spec} failed on {path} (exit {proc.returncode}): {_last_line(proc.stderr)}; "
        f"check the hook at {check.origin}"
    )


def _diff_finding(diff: str, message: str) -> tuple[int, str, str, str]:
    """A whole-file formatter finding: first changed line, and the diff (cut) as detail."""
    lines = diff.splitlines()
    first = next((int(m[1]) for m in map(_HUNK_RE.match, lines) if m), 1)
    cut = lines[:DIFF_LINES] + (
        [f"... ({len(lines) - DIFF_LINES} more lines)"] if len(lines) > DIFF_LINES else []
    )
    return first, message, "\n".join(cut), message


def _trailing_whitespace(data: bytes) -> list[tuple[int, str, str, str]]:
    out: list[tuple[int, str, str, str]] = []
    for number, line in enumerate(data.split(b"\n"), 1):
        text = line.rstrip(b"\r")
        if text != text.rstrip():
            shown = text.decode("utf-8", errors="replace")
            out.append((number, "trailing whitespace", "", f"trailing whitespace|{shown}"))
    return out


def _end_of_file(data: bytes) -> list[tuple[int, str, str, str]]:
    if not data:
        return []
    number = data.count(b"\n") + 1
    if not data.endswith(b"\n"):
        return [(number, "no newline at end of file", "", "eof")]
    if not data.strip(b"\r\n"):
        return [(1, "file holds only blank lines (the hook empties it)", "", "eof")]
    if data.endswith((b"\n\n", b"\r\n\r\n", b"\n\r\n")):
        return [(number - 1, "blank lines at end of file", "", "eof")]
    return []


# --- per upstream -------------------------------------------------------------------------


def _blob(repo: Path, commit: str, path: str) -> bytes | None:
    if not git_ok(["cat-file", "-e", f"{commit}:{path}"], repo):
        return None
    out = git_bytes(["show", f"{commit}:{path}"], repo)
    return out


def _check_file(
    runner: ToolRunner, check: Check, path: str, data: bytes, before: bytes | None
) -> list[Finding]:
    """Findings of `check` on the patched `data`; those `before` (the parent) had are marked."""
    found = runner.run(check, path, data)
    if not found:
        return []
    baseline = Counter(key for *_, key in runner.run(check, path, before)) if before else Counter()
    findings: list[Finding] = []
    for line, message, detail, key in found:
        old = baseline[key] > 0
        baseline[key] -= 1 if old else 0
        findings.append(Finding(check.label, path, line, message, old, detail))
    return findings


def patch_commits(repo: Path, pin: str, series: list[Patch], up: Upstream) -> list[str]:
    """The commit of each patch on top of the pin; raise unless pin..HEAD is exactly the series.

    Matched by content (`git patch-id`), so a checkout whose patches were applied by hand with
    `git am` qualifies, and a commit edited since its patch was exported does not.
    """
    commits = git_text(["rev-list", "--reverse", "--topo-order", f"{pin}..HEAD"], repo).split()
    fix = f"run `tools/patches apply {up.name}` (or `tools/patches export {up.name}`)"
    if len(commits) != len(series):
        raise PatchToolError(
            f"{up.path}: {len(commits)} commit(s) on top of the pin but the series has "
            f"{len(series)} patch(es): {fix}"
        )
    for commit, patch in zip(commits, series, strict=True):
        if patch_id(repo, format_patch(repo, f"{commit}~1..{commit}")) != patch_id(
            repo, patch.path.read_bytes()
        ):
            raise PatchToolError(
                f"{up.path}: commit {commit[:12]} differs from {patch.path.name} (patch-id): "
                f"the checkout is not the patched state of the series; {fix}"
            )
    return commits


def check_upstream(root: Path, up: Upstream, uv: str | None = None) -> UpstreamReport:
    """Run the upstream's own checks on every patch of `up`'s applied series."""
    start = time.monotonic()
    source = detect_source(root, up)
    report = UpstreamReport(up.name, source.kind, "checked", source.detail)
    series = load_series(root / up.series_dir)
    repo = checkout_dir(root, up)
    if source.kind == MISSING:
        report.state, report.detail = "not-checked", f"not checked here: {source.detail}"
        report.unchecked.append(report.detail)
        return report
    if not series:
        report.state = "no-patches"
        return report
    dirty = dirty_files(repo)
    if dirty:
        raise PatchToolError(
            f"{up.path} has uncommitted changes ({', '.join(d[3:] for d in dirty[:3])}): the "
            "checks read the config from the work tree; commit, stash or `tools/patches apply`"
        )
    commits = patch_commits(repo, source.pin, [patch for _, patch in series], up)
    checks, report.not_run, why = load_checks(repo, up, source)
    if why:
        report.unchecked.append(why)
    report.checks = [f"{c.label} from {c.origin}" for c in checks]
    signoff, report.dco = signoff_rule(repo, up, source)
    if signoff is None:
        report.unchecked.append(report.dco)
    runner = ToolRunner(uv or find_uv(), repo)
    for index, (_, patch) in enumerate(series):
        commit, parent = commits[index], commits[index - 1] if index else source.pin
        files = [f.path for f in patch.files if not f.is_deleted and not f.binary]
        result = PatchReport(patch.path.name, files)
        patch_file = patch.path.relative_to(root).as_posix()
        if signoff:
            result.ran.append("dco")
            result.findings += dco_findings(patch, patch_file)
        for path in files:
            data = _blob(repo, commit, path)
            if data is None or _blob(repo, "HEAD", path) is None:
                result.notes.append(f"{path}: not in the patched tree (a later patch removes it)")
                continue
            before = _blob(repo, parent, path)
            for check in checks:
                if check.applies(path, data):
                    if check.label not in result.ran:
                        result.ran.append(check.label)
                    result.findings += _check_file(runner, check, path, data, before)
        report.patches.append(result)
    if report.unchecked and not checks:
        report.state = "not-checked"
    report.seconds = round(time.monotonic() - start, 2)
    return report
