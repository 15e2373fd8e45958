"""`export`: regenerate patch files from the commits of the `patched` branch.

Editing a patch means editing its commit (e.g. `git commit --amend`, `git rebase -i` on
branch `patched` in the upstream checkout) and exporting. Commits map to series entries by
position; commits beyond the series become new patches named after their subject and are
appended to `series`. Output is `git.format_patch` (pinned flags and config), so it is
byte-identical on every machine; `--check` exports into memory and diffs against the files.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import branch_commits, export_commits, git_text
from ..model.manifest import Upstream
from ..model.series import SERIES_FILE, read_series
from ..source.checkout import (
    BRANCH,
    applied_names,
    checkout_dir,
    patched_range,
    record_names,
)

_SLUG_RE = re.compile(r"[^a-z0-9]+")


@dataclass
class Export:
    """Fresh patch bytes per file name, in series order, plus the series text to write."""

    upstream: str
    files: dict[str, bytes] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)
    series_text: str = ""


def slug(subject: str) -> str:
    """A patch file name from a commit subject: `Fix DDP hooks!` -> `fix-ddp-hooks.patch`."""
    text = _SLUG_RE.sub("-", subject.lower()).strip("-")[:60].rstrip("-")
    return f"{text or 'patch'}.patch"


def export_upstream(root: Path, up: Upstream) -> Export:
    """Fresh export of `up`'s patched branch mapped onto its series."""
    series_dir = root / up.series_dir
    entries = read_series(series_dir / SERIES_FILE)
    repo, base, tip = patched_range(root, up)
    commits = branch_commits(repo, base, tip)
    if len(commits) < len(entries):
        raise PatchToolError(
            f"{up.name}: branch {BRANCH} has {len(commits)} commits on the pin but "
            f"{series_dir / SERIES_FILE} lists {len(entries)}; remove the dropped patches from "
            "series (and their files) or re-run tools/patches apply"
        )
    known = applied_names(repo)
    joined = [e.name for e in entries[: len(commits)] if e.name not in known] if known else []
    if joined:
        raise PatchToolError(
            f"{up.name}: {', '.join(joined)} joined {series_dir / SERIES_FILE} after branch "
            f"{BRANCH} was applied: its commits are the old series', and exporting would write "
            f"them under the new names; run tools/patches apply {up.name} first (--force keeps "
            "commits of yours as a branch)"
        )
    result = Export(up.name)
    for index, data in enumerate(export_commits(repo, commits)):
        if index < len(entries):
            name = entries[index].name
        else:
            subject = git_text(["log", "-1", "--format=%s", commits[index]], repo)
            name = slug(subject)
            if name in result.files or (series_dir / name).exists():
                name = name.removesuffix(".patch") + f"-{index + 1}.patch"
            result.added.append(name)
        result.files[name] = data
    text = (series_dir / SERIES_FILE).read_text(encoding="utf-8")
    if result.added:
        text = text + ("" if text.endswith("\n") or not text else "\n")
        text += "".join(f"{name}\n" for name in result.added)
    result.series_text = text
    return result


def diff_export(root: Path, up: Upstream, fresh: Export) -> list[str]:
    """Unified diff lines between the files on disk and a fresh export ([] when identical)."""
    series_dir = root / up.series_dir
    out: list[str] = []
    for name, data in fresh.files.items():
        path = series_dir / name
        old = path.read_bytes() if path.exists() else b""
        if old != data:
            rel = path.relative_to(root).as_posix()
            out += difflib.unified_diff(
                old.decode("utf-8", errors="replace").splitlines(keepends=True),
                data.decode("utf-8", errors="replace").splitlines(keepends=True),
                f"a/{rel}" if path.exists() else "/dev/null",
                f"b/{rel} (fresh export)",
            )
    if fresh.added:
        out.append(f"series: new commits not in {up.series_dir}/series: {', '.join(fresh.added)}\n")
    return out


def write_export(root: Path, up: Upstream, fresh: Export) -> list[str]:
    """Write changed files; return the relative paths written."""
    series_dir = root / up.series_dir
    written = []
    for name, data in fresh.files.items():
        path = series_dir / name
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
            written.append(path.relative_to(root).as_posix())
    series = series_dir / SERIES_FILE
    if series.read_text(encoding="utf-8") != fresh.series_text:
        series.write_text(fresh.series_text, encoding="utf-8")
        written.append(series.relative_to(root).as_posix())
    repo = checkout_dir(root, up)
    known = applied_names(repo)
    if fresh.added and known is not None:  # the commits it named are the branch's now
        record_names(repo, known + fresh.added)
    return written
