"""The copyright-header rule: a Python file a patch adds carries the upstream's header.

Why only new files: a file the patch changes keeps the header it has upstream (the upstream's
CI judges it the same before and after); a new one is the patch's to get right, and upstream's
copyright check fails the PR without it.
"""

from __future__ import annotations

import re
from email.utils import parsedate_to_datetime

from ..model.series import Patch
from .config import COPYRIGHT_RULES
from .model import COPYRIGHT, CopyrightRule, Finding

HEADER_LINES = 16  # the license text must follow within this many lines of the first one
_PREAMBLE_RE = re.compile(r"^(#!|#.*coding[:=])")


def copyright_rule(upstream: str) -> tuple[CopyrightRule | None, str]:
    """(the rule, a line saying what it is) for an upstream; (None, "") when none is known."""
    rule = COPYRIGHT_RULES.get(upstream)
    if rule is None:
        return None, ""
    then = " + the Apache-2.0 license text" if rule.then else ""
    first = rule.expected.format(year="<year>")
    return rule, f"new .py files start `{first}`{then} (from {rule.source})"


def patch_year(patch: Patch) -> str:
    """The year the patch was written (its Date:), for the header to suggest."""
    try:
        return str(parsedate_to_datetime(patch.date).year)
    except (TypeError, ValueError):
        return "<year>"


def header_problem(rule: CopyrightRule, data: bytes) -> str:
    """What is missing from the file's header ("" when it has the upstream's header)."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    start = 0
    while start < len(lines) and _PREAMBLE_RE.match(lines[start]):
        start += 1
    first = lines[start] if start < len(lines) else ""
    if not re.match(rule.first_line, first):
        return "no copyright header"
    if rule.then and rule.then not in lines[start + 1 : start + HEADER_LINES]:
        return "copyright line without the license text"
    return ""


def copyright_findings(rule: CopyrightRule, path: str, data: bytes, year: str) -> list[Finding]:
    """A finding when new file `path` (an empty one is exempt) lacks the upstream's header."""
    if not path.endswith(".py") or not data.strip():
        return []
    why = header_problem(rule, data)
    if not why:
        return []
    then = f", then the license text ({rule.then!r} ...)" if rule.then else ""
    expected = rule.expected.format(year=year)
    message = f"new file has {why}; its first line should be `{expected}`{then}"
    return [Finding(COPYRIGHT, path, 1, message)]
