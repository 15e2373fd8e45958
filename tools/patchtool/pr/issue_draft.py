"""The linked issue's text from a patch: feature or fix, and the answers its message makes true.

Feature or fix decides the template (feature request / bug report). The rule, first match wins:
1. a `Kind: feature` or `Kind: fix` trailer (the patch author says so);
2. the subject's Conventional Commits type: `feat` is a feature, `fix` a fix (Megatron-Bridge
   and NeMo-RL title their commits so);
3. the subject's first word (after a `scope:` prefix such as `moe:`): a feature verb (Add,
   Support, Allow, Let, Enable, Introduce, Implement, Expose, Give, Run, Build) or a fix verb
   (Fix, Correct, Repair, Restore, Keep, Prevent, Avoid, Handle);
4. otherwise a fix: the series carries one fix per patch (DESIGN "Patch file conventions").
The answers are the message's own paragraphs, by the convention of its message (why, what
changed, how it was tested, where it is still needed): never more than the message says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import PatchToolError
from ..model.trailers import FEATURE, FIX, KIND_KEY
from .issue_template import IssueTemplate, fill
from .pr_template import drop_carry_notes, split_trailers

FEATURE_VERBS = (
    "add",
    "support",
    "allow",
    "let",
    "enable",
    "introduce",
    "implement",
    "expose",
    "give",
    "run",
    "build",
)
FIX_VERBS = ("fix", "correct", "repair", "restore", "keep", "prevent", "avoid", "handle")
_CONVENTIONAL_RE = re.compile(r"^(?P<type>[a-z]+)(\([^)]*\))?!?:\s*(?P<rest>.*)$", re.S)
_SCOPE_RE = re.compile(r"^[\w./-]+:\s+(?P<rest>.*)$", re.S)
_TESTED_RE = re.compile(
    r"^(tested\b|measured\b|checked\b|added\b.*\btests?\b|(\S+\s+){0,3}(unit\s+)?tests?\b)",
    re.I | re.S,
)
_STILL_RE = re.compile(r"^still (needed|present|there)\b", re.I)
_WHERE_RE = re.compile(r"\b(main|dev|master)\s+at\s+([0-9a-f]{7,40})\b")


@dataclass(frozen=True)
class IssueKind:
    kind: str  # FEATURE | FIX
    rule: str  # which rule chose it, in words (the draft says it)

    @property
    def template_kind(self) -> str:
        return "feature request" if self.kind == FEATURE else "bug report"


def issue_kind(subject: str, kind_trailers: list[str]) -> IssueKind:
    """Feature or fix by the rule in this module's docstring."""
    if kind_trailers:
        value = kind_trailers[0].strip().lower()
        if value not in (FEATURE, FIX) or len(kind_trailers) > 1:
            raise PatchToolError(
                f"{KIND_KEY}: {', '.join(kind_trailers)}: want one `{KIND_KEY}: feature` or "
                f"`{KIND_KEY}: fix` trailer"
            )
        return IssueKind(value, f"the patch says `{KIND_KEY}: {value}`")
    typed = _CONVENTIONAL_RE.match(subject)
    if typed and typed.group("type") in ("feat", "fix"):
        kind = FEATURE if typed.group("type") == "feat" else FIX
        return IssueKind(
            kind, f"the subject's Conventional Commits type is `{typed.group('type')}`"
        )
    word = first_word(subject)
    if word.lower() in FEATURE_VERBS:
        return IssueKind(FEATURE, f"the subject's first word `{word}` is a feature verb")
    if word.lower() in FIX_VERBS:
        return IssueKind(FIX, f"the subject's first word `{word}` is a fix verb")
    return IssueKind(
        FIX,
        f"nothing says feature (no `{KIND_KEY}:` trailer, no `feat`/`fix` type, `{word}` is "
        f"neither a feature nor a fix verb), and a patch is a fix by default; add "
        f"`{KIND_KEY}: feature` to it if it is one",
    )


def description(subject: str) -> str:
    """The subject without its `type(scope): ` prefix."""
    typed = _CONVENTIONAL_RE.match(subject)
    return typed.group("rest") if typed else subject


def first_word(subject: str) -> str:
    """The subject's first word after a `type(scope):` or `scope:` prefix."""
    rest = description(subject)
    scoped = _SCOPE_RE.match(rest)
    rest = scoped.group("rest") if scoped else rest
    return (re.findall(r"[A-Za-z][\w-]*", rest) or [""])[0]


@dataclass(frozen=True)
class MessageParts:
    """The patch message cut by the series' message convention."""

    problem: str  # the first paragraph, with the error output and sentences continuing it
    change: str  # what the patch does
    tested: str  # how it was tested
    logs: str  # the error output quoted in the problem (indented paragraphs)
    where: tuple[str, ...]  # "main at d98e8a64": where the message says it is still needed


def message_parts(body: str) -> MessageParts:
    """`body` (the message without subject) cut into its parts."""
    text = split_trailers(body)[0]
    where = tuple(dict.fromkeys(f"{b} at {s}" for b, s in _WHERE_RE.findall(text)))
    paragraphs = [p for p in re.split(r"\n[ \t]*\n", drop_carry_notes(text).strip("\n")) if p]
    cut = 1
    while cut < len(paragraphs) and _continues(paragraphs[cut], paragraphs[cut - 1]):
        cut += 1
    problem, rest = paragraphs[:cut], paragraphs[cut:]
    tested = [p for p in rest if _TESTED_RE.match(p.strip())]
    change = [p for p in rest if p not in tested and not _STILL_RE.match(p.strip())]
    logs = [_dedent(p) for p in problem if p.startswith((" ", "\t"))]
    joined = ["\n\n".join(x) for x in (problem, change, tested, logs)]
    return MessageParts(joined[0], joined[1], joined[2], joined[3], where)


def _continues(paragraph: str, before: str) -> bool:
    """Does `paragraph` still belong to the problem: quoted output (indented), the sentence
    after it (lower case), or the list a paragraph ending in `:` announced?"""
    return (
        paragraph.startswith((" ", "\t"))
        or paragraph[:1].islower()
        or (before.rstrip().endswith(":") and paragraph.lstrip()[:2] in ("1.", "- ", "* "))
    )


def _dedent(paragraph: str) -> str:
    lines = paragraph.split("\n")
    cut = min(len(x) - len(x.lstrip()) for x in lines if x.strip())
    return "\n".join(x[cut:] for x in lines)


def answers(kind: str, subject: str, parts: MessageParts, tests: list[str]) -> dict[str, str]:
    """What the patch answers, by field role; nothing it does not state."""
    test_block = (
        "The pull request adds these tests; they fail without its change:\n\n```shell\n"
        + "\n".join(f"pytest {node}" for node in tests)
        + "\n```"
        if tests
        else ""
    )
    how = "\n\n".join(x for x in (parts.tested, test_block) if x)
    out = {"problem": parts.problem, "logs": parts.logs}
    out["environment"] = "\n".join(f"Branch / commit: {w}" for w in parts.where)
    if kind == FEATURE:
        proposal = f"{description(subject).rstrip('.')}.\n\n{parts.change}".strip()
        out["solution"] = f"{proposal}\n\nA pull request with this change links this issue."
        out["context"] = f"How the change was tested:\n\n{how}" if how else ""
    else:
        out["repro"] = how
    return out


def draft_text(
    template: IssueTemplate | None, kind: IssueKind, answers_by_role: dict[str, str]
) -> tuple[str, list[str]]:
    """(issue body, fields left for the filer): the template filled, else a plain draft
    (the upstream has no template of that kind); a comment on top says what chose it."""
    if template:
        body, left = fill(template, answers_by_role)
        source = f"Drafted from {template.path}"
    else:
        body, left = _plain(kind, answers_by_role), []
        source = f"A plain draft (the upstream has no {kind.template_kind} template)"
    counted = f" {len(left)} field(s) left for you: {', '.join(left)}." if left else ""
    why = f"a {kind.template_kind} because {kind.rule}."
    note = f"<!-- {source}, {why}{counted} Delete this comment. -->"
    return f"{note}\n\n{body}", left


def _plain(kind: IssueKind, by_role: dict[str, str]) -> str:
    sections = [("Problem", "problem")]
    sections += [("Proposed change", "solution")] if kind.kind == FEATURE else []
    sections += [("How to reproduce", "repro"), ("How it was tested", "context")]
    sections += [("Environment", "environment"), ("Logs", "logs")]
    out = []
    for heading, role in sections:
        text = by_role.get(role, "").strip()
        if text:
            text = f"```\n{text}\n```" if role == "logs" else text
            out += [f"## {heading}", "", text, ""]
    return "\n".join(out).strip("\n") + "\n"
