"""The PR title against the upstream's title convention: checked, never rewritten.

Why notes and not edits: the title is the subject the patch carries (with squash merges, the
subject of the upstream commit); a subject that breaks the convention is fixed in the patch, by
a person, so `open-pr` says what is off and leaves the subject alone. The convention is read
from the upstream's own files: a CONTRIBUTING text that asks for Conventional Commits (with its
listed types and scopes), a PR-title workflow (semantic-pull-request), or a CONTRIBUTING text
that asks for the imperative mood.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The documents that state how to title a change (CONTRIBUTING.md may only link the last one:
# Megatron-LM's points at its developer guide, docs/developer/contribute.md).
CONVENTION_DOCS = ("CONTRIBUTING.md", ".github/CONTRIBUTING.md", "docs/developer/contribute.md")
# The types amannn/action-semantic-pull-request accepts as NVIDIA-NeMo/FW-CI-templates'
# _semantic_pull_request.yml configures it (NeMo-RL's semantic-pull-request.yml calls it).
CONVENTIONAL_TYPES = (
    "feat",
    "fix",
    "docs",
    "style",
    "refactor",
    "perf",
    "test",
    "build",
    "ci",
    "chore",
    "revert",
    "cp",
)
CONVENTIONAL, SENTENCE = "conventional", "sentence"
_CONVENTIONAL_RE = re.compile(r"^(?P<type>[a-z]+)(?:\((?P<scope>[^)]*)\))?!?: (?P<desc>\S.*)$")
_BULLET_RE = re.compile(r"^\s*[-*]\s+`([^`]+)`")
_WORKFLOW_RE = re.compile(r"semantic|pr[-_]title", re.I)


@dataclass(frozen=True)
class TitleConvention:
    """How an upstream titles a change, and which of its files says so."""

    kind: str  # CONVENTIONAL or SENTENCE
    source: str
    types: tuple[str, ...] = CONVENTIONAL_TYPES
    scopes: tuple[str, ...] = ()  # () = any scope
    lowercase: bool = False  # the description starts lowercase, no trailing period
    imperative: bool = False


def listed(text: str, label: str) -> tuple[str, ...]:
    """The `` - `name` `` items of the list under a `**<label>**` line of a Markdown text."""
    lines = text.split("\n")
    start = next((i for i, x in enumerate(lines) if x.strip().startswith(f"**{label}**")), -1)
    if start < 0:
        return ()
    items: list[str] = []
    for line in lines[start + 1 :]:
        match = _BULLET_RE.match(line)
        if match:
            items.append(match.group(1))
        elif line.strip() or items:
            break
    return tuple(items)


def title_convention(docs: dict[str, str], workflows: list[str]) -> TitleConvention:
    """The convention from the upstream's docs (path -> text) and workflow file names."""
    for path, text in docs.items():
        if re.search(r"conventional commits", text, re.I):
            return TitleConvention(
                CONVENTIONAL,
                path,
                listed(text, "Types") or CONVENTIONAL_TYPES,
                listed(text, "Scopes"),
                lowercase="lowercase first letter" in text.lower(),
            )
    semantic = sorted(w for w in workflows if _WORKFLOW_RE.search(w))
    if semantic:
        return TitleConvention(CONVENTIONAL, semantic[0])
    imperative = next((p for p, text in docs.items() if "imperative mood" in text.lower()), "")
    return TitleConvention(
        SENTENCE, imperative or "no stated convention", imperative=bool(imperative)
    )


def title_notes(title: str, convention: TitleConvention) -> list[str]:
    """What in `title` breaks the convention (nothing when it follows it)."""
    where = f"({convention.source}); the subject is used as is: edit the patch to change it"
    if convention.kind == SENTENCE:
        first = title.split(" ", 1)[0].lower()
        if convention.imperative and first.endswith(("ed", "ing")) and ":" not in first:
            return [f"title: start with an imperative verb, not {first!r} {where}"]
        return [f"title: no trailing period {where}"] if title.endswith(".") else []
    match = _CONVENTIONAL_RE.match(title)
    if not match:
        return [f"title: not `type(scope): description` (Conventional Commits) {where}"]
    notes = []
    if match.group("type") not in convention.types:
        notes.append(
            f"title: type {match.group('type')!r} is not one of {', '.join(convention.types)} "
            f"{where}"
        )
    scopes = [s.strip() for s in (match.group("scope") or "").split(",") if s.strip()]
    off = [s for s in scopes if convention.scopes and s not in convention.scopes]
    if off:
        notes.append(
            f"title: scope {', '.join(off)} is not one of {', '.join(convention.scopes)} {where}"
        )
    desc = match.group("desc")
    if convention.lowercase and (desc[:1].isupper() or desc.endswith(".")):
        notes.append(f"title: lowercase first letter and no trailing period {where}")
    return notes
