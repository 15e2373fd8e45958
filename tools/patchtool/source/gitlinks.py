"""The superproject's gitlinks versus the manifest pins (what lint and status compare)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from ..git.git import git_text
from ..model.manifest import MANIFEST_PATH, Upstream


def staged_gitlink(root: Path, up: Upstream) -> str:
    """The gitlink commit at `up.path` in the superproject's index ('' if none)."""
    out = git_text(["ls-files", "-s", "--", up.path], root, check=False)
    for row in out.splitlines():
        meta, path = row.split("\t", 1)
        mode, sha = meta.split()[:2]
        if path == up.path and mode == "160000":
            return sha
    return ""


def committed_gitlink(root: Path, up: Upstream) -> str:
    """The gitlink commit at `up.path` in the superproject's HEAD ('' if none or no HEAD)."""
    out = git_text(["ls-tree", "HEAD", "--", up.path], root, check=False)
    for row in out.splitlines():
        meta, path = row.split("\t", 1)
        mode, _kind, sha = meta.split()[:3]
        if path == up.path and mode == "160000":
            return sha
    return ""


def committed_pin(root: Path, up: Upstream) -> str:
    """The pin of `up` in HEAD's manifest ('' if HEAD has none): a pin move being committed
    compares the staged gitlink with the staged manifest and HEAD's with HEAD's."""
    text = git_text(["show", f"HEAD:{MANIFEST_PATH.as_posix()}"], root, check=False)
    try:
        table = tomllib.loads(text).get(up.name, {}) if text else {}
    except tomllib.TOMLDecodeError:
        return ""
    return str(table.get("commit", "")) if isinstance(table, dict) else ""


def gitlink_problems(root: Path, up: Upstream) -> list[str]:
    """Why the staged or committed gitlink of `up` is not the manifest pin (empty if fine)."""
    problems: list[str] = []
    fix = "gitlinks change only through tools/patches rebase/pin"
    staged = staged_gitlink(root, up)
    if staged != up.commit:
        problems.append(
            f"staged gitlink {up.path} is {staged[:12] or 'absent'}, manifest pins "
            f"{up.commit[:12]}: unstage it (git restore --staged {up.path}); {fix}"
        )
    committed, pinned = committed_gitlink(root, up), committed_pin(root, up)
    if committed and pinned and committed != pinned:
        problems.append(
            f"committed gitlink {up.path} in HEAD is {committed[:12]}, HEAD's manifest pins "
            f"{pinned[:12]}: amend the commit to restore it; {fix}"
        )
    return problems
