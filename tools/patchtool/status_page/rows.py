"""What the repository itself says about each carried patch: the static half of the page.

Everything here is read from the series files and the superproject's own git history, so it
is the same on every machine (CI regenerates it to check the committed page is current).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import git_text
from ..model.manifest import Upstream
from ..model.ports import find_port
from ..model.series import load_series
from ..model.trailers import STATUS_KEY

_PR_RE = re.compile(r"https://github\.com/([\w.-]+/[\w.-]+)/pull/(\d+)")


@dataclass(frozen=True)
class PatchRow:
    """One carried patch as the repository describes it."""

    upstream: str
    name: str
    subject: str
    added: int
    removed: int
    status: str
    pr_repo: str  # "owner/name" of the upstream PR, "" when none is recorded
    pr_number: int
    first_carried: str  # YYYY-MM-DD of the commit that added the file, "" when uncommitted
    test: str
    sha256: str  # of the patch file: a measurement is reused only for the same bytes
    port_sha256: str = ""  # of its port onto main (model/ports.py), "" when it has none

    @property
    def key(self) -> tuple[str, str]:
        return self.upstream, self.name


def pull_request(values: list[str]) -> tuple[str, int]:
    """(owner/name, number) of the first GitHub PR URL among trailer values, else ("", 0)."""
    for value in values:
        match = _PR_RE.search(value)
        if match:
            return match.group(1), int(match.group(2))
    return "", 0


def first_carried(root: Path, path: Path) -> str:
    """Date the superproject first committed `path` (following renames), "" if never."""
    rel = path.relative_to(root).as_posix()
    dates = git_text(
        ["log", "--follow", "--diff-filter=A", "--format=%cs", "--", rel], root, check=False
    )
    return dates.splitlines()[-1] if dates else ""


def series_rows(root: Path, up: Upstream) -> list[PatchRow]:
    """The rows of `up`'s active series, in series order."""
    if git_text(["rev-parse", "--is-shallow-repository"], root) == "true":
        raise PatchToolError(
            f"{root} is a shallow clone: the page dates each patch by its first commit; "
            "fetch the history (git fetch --unshallow) and run again"
        )
    rows = []
    for entry, patch in load_series(root / up.series_dir):
        path = root / up.series_dir / entry.name
        added = sum(len(h.added) for f in patch.files for h in f.hunks)
        removed = sum(
            h.old_count - (h.new_count - len(h.added)) for f in patch.files for h in f.hunks
        )
        status = " ".join(patch.trailer_values(STATUS_KEY)) or "none"
        repo, number = pull_request(
            [*patch.trailer_values(STATUS_KEY), *patch.trailer_values("Origin")]
        )
        rows.append(
            PatchRow(
                upstream=up.name,
                name=entry.name,
                subject=patch.subject,
                added=added,
                removed=removed,
                status=status,
                pr_repo=repo,
                pr_number=number,
                first_carried=first_carried(root, path),
                test=" ".join(patch.trailer_values("Test")),
                sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                port_sha256=_sha256(find_port(path)),
            )
        )
    return rows


def _sha256(path: Path | None) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path is not None else ""
