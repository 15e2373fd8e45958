"""Rewrite one trailer of a patch mbox in place.

Why text editing is enough: `git format-patch` copies the commit message body verbatim, so
replacing a trailer line in the file yields exactly what exporting the amended commit would
(`export --check` stays clean as long as the commit is amended the same way; see
`amend_commit_trailer`).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import git, git_text
from .series import parse_patch_text

STATUS_KEY = "Upstream-Status"
# `Origin:` of a patch `adopt` carried: someone else's upstream PR (its commit, its author).
_ADOPTED_RE = re.compile(r"^upstream PR #(\d+) by (.+), adopted\b")


def adopted_origin(number: int, author: str) -> str:
    """The `Origin:` value `adopt` writes: `upstream PR #N by <author>, adopted (author kept)`."""
    return f"upstream PR #{number} by {author}, adopted (author kept)"


def adopted_pr(origins: list[str]) -> str:
    """`upstream PR #N by <author>` when a patch's `Origin:` says `adopt` carried it, else ""."""
    for value in origins:
        if match := _ADOPTED_RE.match(value):
            return f"upstream PR #{match.group(1)} by {match.group(2)}"
    return ""


# Why a patch left the series (rebase: the upstream commit; adopt: the PR that superseded it).
EVIDENCE_KEY = "Upstream-Evidence"
STATUS_KINDS = ("pending", "submitted", "accepted", "not-needed", "inappropriate")
# `Kind: feature | fix`: the patch author's word on which issue template its linked issue
# takes (open-pr, pr/issue_draft.py); lint checks the value.
KIND_KEY = "Kind"
FEATURE, FIX = "feature", "fix"
_TRAILER_LINE_RE = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):[ \t]*(.*)$")


def status_value(kind: str, detail: str) -> str:
    """`accepted abc123` etc.; refuse a kind the linter would reject or a multi-line detail."""
    if kind not in STATUS_KINDS:
        raise PatchToolError(
            f"unknown Upstream-Status {kind!r}; use one of {', '.join(STATUS_KINDS)}"
        )
    if "\n" in detail or "\r" in detail:
        raise PatchToolError("an Upstream-Status detail must be one line")
    detail = detail.strip()
    if kind != "pending" and not detail:
        raise PatchToolError(f"Upstream-Status {kind} needs a detail (URL, commit, or reason)")
    return f"{kind} {detail}".strip()


def _is_key(line: str, key: str) -> bool:
    return line.lower().startswith(key.lower() + ":")


def _edit_message_lines(lines: list[str], key: str, value: str, where: str) -> list[str]:
    """Replace `key:` in the last paragraph of `lines` (a commit message), or add it there."""
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    start = end
    while start and lines[start - 1].strip():
        start -= 1
    block = lines[start:end]
    is_trailer_block = bool(block) and all(_TRAILER_LINE_RE.match(x) for x in block)
    new_line = f"{key}: {value}"
    if is_trailer_block:
        hits = [i for i, x in enumerate(block) if _is_key(x, key)]
        if len(hits) > 1:
            raise PatchToolError(f"{where}: {len(hits)} '{key}:' trailers; keep exactly one")
        if hits:
            block[hits[0]] = new_line
        elif key == STATUS_KEY:
            block.insert(0, new_line)  # the convention puts Upstream-Status first
        elif key.startswith("Upstream-") and any(_is_key(x, STATUS_KEY) for x in block):
            at = next(i for i, x in enumerate(block) if _is_key(x, STATUS_KEY))
            block.insert(at + 1, new_line)  # e.g. Upstream-Evidence right under the status
        else:
            block.append(new_line)
        return [*lines[:start], *block, *lines[end:]]
    return [*lines[:end], "", new_line, *lines[end:]]


def set_patch_trailer(data: bytes, key: str, value: str, path: Path) -> bytes:
    """The patch file bytes with trailer `key` set to `value` (nothing else changes)."""
    text = data.decode("utf-8", errors="surrogateescape")
    patch = parse_patch_text(text, path)
    if patch.mbox_count != 1 or not patch.body:
        raise PatchToolError(f"{path}: not a single-commit format-patch mbox with a message body")
    lines = text.split("\n")
    first = patch.body[0][0] - 1  # 0-based index of the first message line
    last = patch.body[-1][0]  # 0-based index just after the last non-blank message line
    edited = _edit_message_lines(lines[first:last], key, value, str(path))
    return "\n".join([*lines[:first], *edited, *lines[last:]]).encode(
        "utf-8", errors="surrogateescape"
    )


def set_message_trailer(message: str, key: str, value: str, where: str) -> str:
    """A commit message (subject, body) with trailer `key` set to `value`."""
    lines = message.split("\n")
    # Keep the subject paragraph out of the trailer search.
    sep = lines.index("") if "" in lines else len(lines)
    head, body = lines[:sep], lines[sep:]
    if not any(x.strip() for x in body):
        return "\n".join([*head, "", f"{key}: {value}"]) + "\n"
    edited = _edit_message_lines(body, key, value, where)
    out = "\n".join([*head, *edited])
    return out if out.endswith("\n") else out + "\n"


def amend_commit_trailer(repo: Path, commit: str, tip: str, key: str, value: str) -> str:
    """Rewrite `commit`'s message trailer and replay `commit..tip` on it; return the new tip.

    Trees, authors and committers are kept byte for byte (only messages and parents change),
    so a checked-out worktree stays identical and re-export matches the edited patch file.
    """
    chain = git_text(["rev-list", "--reverse", "--ancestry-path", f"{commit}..{tip}"], repo)
    commits = [commit, *[c for c in chain.splitlines() if c]]
    if git_text(["rev-list", "--merges", f"{commit}^..{tip}"], repo):
        raise PatchToolError(
            f"{commit[:12]}..{tip[:12]} contains merges; a patched branch is linear"
        )
    new_parent: str | None = None
    for index, sha in enumerate(commits):
        raw = git(["cat-file", "commit", sha], repo)
        header, _, message = raw.partition("\n\n")
        if index == 0:
            message = set_message_trailer(message, key, value, f"commit {sha[:12]}")
        else:
            header_lines = header.split("\n")
            header_lines = [
                f"parent {new_parent}" if x.startswith("parent ") else x for x in header_lines
            ]
            header = "\n".join(header_lines)
        if "\ngpgsig " in "\n" + header:
            raise PatchToolError(f"commit {sha[:12]} is signed; re-sign it by hand after editing")
        new_parent = git_text(
            ["hash-object", "-t", "commit", "-w", "--stdin"], repo, input=f"{header}\n\n{message}"
        )
    assert new_parent is not None
    return new_parent
