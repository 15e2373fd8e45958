"""What upstream-check reports: the checks, their findings, per patch and per upstream.

Plain data, shared by the check selection (config), the tool runner and the per-upstream flow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

HOOKS_FILE = ".pre-commit-config.yaml"
RUFF, RUFF_FORMAT, BLACK, ISORT = "ruff", "ruff-format", "black", "isort"
TRAILING_WS, END_OF_FILE = "trailing-whitespace", "end-of-file-fixer"
COPYRIGHT = "copyright"
TOOL_TIMEOUT_S = 300.0
DIFF_LINES = 30


_PY_SUFFIXES = (".py", ".pyi")


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


@dataclass(frozen=True)
class CopyrightRule:
    """The copyright header an upstream wants on a new Python file (config.COPYRIGHT_RULES)."""

    first_line: str  # regex the header's first line matches (after a `#!`/coding line)
    expected: str  # the first line to write; `{year}`: the year the patch was written
    then: str = ""  # a line the header must hold after it (the license), "" = none
    source: str = ""  # what the rule is derived from


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
    # `upstream PR #N by <author>` for a patch `adopt` carries: its findings are the PR's, to be
    # fixed there, so they are reported and do not fail the check.
    adopted: str = ""

    @property
    def new_findings(self) -> list[Finding]:
        return [f for f in self.findings if not f.preexisting]


class CheckState(StrEnum):
    """How far upstream-check got with one upstream (its `state` in `--json`).

    CHECKED: every patch was checked (findings, if any, are in the report; exit 1 if any).
    NO_PATCHES: the series is empty, nothing to check. NOT_CHECKED: the upstream (or its check
    config on a stand-in) is not available here; exit 3 unless --allow-missing. ERROR: checking
    failed with the recorded message (exit 1).
    """

    CHECKED = "checked"
    NO_PATCHES = "no-patches"
    NOT_CHECKED = "not-checked"
    ERROR = "error"


@dataclass
class UpstreamReport:
    """What upstream-check found for one upstream; `state` says how far it got."""

    name: str
    source: str
    state: CheckState
    detail: str = ""
    checks: list[str] = field(default_factory=list)
    dco: str = ""
    copyright: str = ""  # the copyright-header rule checked on new files ("" = none known)
    not_run: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    patches: list[PatchReport] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def finding_count(self) -> int:
        return sum(len(p.new_findings) for p in self.patches if not p.adopted)
