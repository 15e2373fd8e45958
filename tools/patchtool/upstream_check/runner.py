"""Running the formatters/linters: `uv tool run --from <tool>==<version>` resolved once per tool,
then its binary called on stdin with `--stdin-filename` from the checkout root; plus the emulated
whitespace hooks. Output becomes findings (line, message, a short diff).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import PatchToolError
from .model import (
    BLACK,
    DIFF_LINES,
    END_OF_FILE,
    RUFF,
    RUFF_FORMAT,
    TOOL_TIMEOUT_S,
    TRAILING_WS,
    Check,
)

# The repository (tools/patchtool/upstream_check/runner.py -> the root): uv runs from there.
PROJECT_ROOT = Path(__file__).resolve().parents[3]

# --- running the tools --------------------------------------------------------------------


_HUNK_RE = re.compile(r"^@@ -(\d+)")


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
                [uv, "--version"], capture_output=True, cwd=PROJECT_ROOT, check=False
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
