"""An upstream's issue templates (`.github/ISSUE_TEMPLATE/`): read, chosen, filled.

Two formats exist upstream: Markdown with YAML front matter (Megatron-LM: sections under
`**Bold**` lines) and YAML issue forms (Megatron-Bridge: `body:` items with a label). Both become
one `IssueTemplate` of labelled fields, each with a role (problem, repro, expected, solution,
...) found from its label, so one filler serves both. `gh issue create --body-file` bypasses the
form, so a form is written the way GitHub renders a submitted one (`### Label`, then the
answer). Pure functions over text; pr/linked_issue.py reads the files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..errors import PatchToolError
from ..model.trailers import FEATURE, FIX
from .issue_form import parse_yaml

ISSUE_TEMPLATE_DIR = ".github/ISSUE_TEMPLATE"
_TEMPLATE_SUFFIXES = (".md", ".yml", ".yaml")
_FRONT_MATTER_RE = re.compile(r"\A---[ \t]*\n(.*?)\n---[ \t]*\n?", re.S)
_SECTION_RE = re.compile(r"^(?:\*\*(?P<bold>[^*].*?)\*\*:?|#{1,6}\s+(?P<head>.+?))\s*$")
_KIND_RE = {FEATURE: re.compile(r"feature|enhancement", re.I), FIX: re.compile(r"\bbug", re.I)}
# A field's role from its label: the first pattern that matches wins (order matters:
# "Describe alternatives" before "solution", "reproduce bug" before "bug").
_ROLES = (
    ("alternatives", r"alternative"),
    ("repro", r"reproduc|\brepro\b|\bsteps\b"),
    ("expected", r"\bexpected\b"),
    ("solution", r"solution|desired outcome|proposal|proposed"),
    ("environment", r"environment"),
    ("logs", r"\blogs?\b|stack trace|traceback"),
    ("problem", r"problem|describe the bug|describe the regression|what is broken"),
    ("context", r"context|additional information"),
)


@dataclass(frozen=True)
class Field:
    """One part of the template the filer answers."""

    label: str
    role: str  # see _ROLES; "" = nothing the patch can answer (a dropdown of areas, ...)
    ask: str  # what the template asks there (a form's description, a section's text)
    options: tuple[str, ...] = ()  # a dropdown's choices
    required: bool = False
    render: str = ""  # a form textarea's code language: its answer is a code block
    heading: str = ""  # a Markdown section's heading line as written


@dataclass(frozen=True)
class IssueTemplate:
    path: str
    name: str
    title: str  # the prefix the template gives every title ("[bug] ")
    fields: tuple[Field, ...]
    form: bool  # a YAML issue form (else Markdown)
    preamble: str = ""  # Markdown text above the first section


def role_of(label: str) -> str:
    return next((role for role, pattern in _ROLES if re.search(pattern, label, re.I)), "")


def is_template_file(path: str) -> bool:
    """A template in .github/ISSUE_TEMPLATE/ (config.yml configures the chooser, it is none)."""
    pure = PurePosixPath(path)
    return (
        str(pure.parent).lower() == ISSUE_TEMPLATE_DIR.lower()
        and pure.suffix.lower() in _TEMPLATE_SUFFIXES
        and pure.stem.lower() != "config"
    )


def parse_template(path: str, text: str) -> IssueTemplate:
    """An issue form (.yml/.yaml) or a Markdown template (.md) as fields."""
    if path.lower().endswith(".md"):
        return _markdown_template(path, text)
    return _form_template(path, text)


def _mapping(node: object, where: str) -> dict[str, object]:
    if not isinstance(node, dict):
        raise PatchToolError(f"{where}: want a mapping of keys (an issue template's header)")
    return node


def _markdown_template(path: str, text: str) -> IssueTemplate:
    match = _FRONT_MATTER_RE.match(text)
    header = _mapping(parse_yaml(match.group(1), path) if match else {}, path)
    body = text[match.end() :] if match else text
    preamble: list[str] = []
    sections: list[tuple[str, str, list[str]]] = []
    for line in body.split("\n"):
        heading = _SECTION_RE.match(line.strip())
        if heading:
            label = (heading.group("bold") or heading.group("head")).strip()
            sections.append((label, line.strip(), []))
        else:
            (sections[-1][2] if sections else preamble).append(line)
    fields = tuple(
        Field(label, role_of(label), "\n".join(lines).strip(), heading=head)
        for label, head, lines in sections
    )
    name = str(header.get("name") or PurePosixPath(path).stem)
    title = str(header.get("title") or "")
    return IssueTemplate(path, name, title, fields, False, "\n".join(preamble).strip())


def _form_template(path: str, text: str) -> IssueTemplate:
    header = _mapping(parse_yaml(text, path), path)
    items = header.get("body")
    if not isinstance(items, list):
        raise PatchToolError(f"{path}: an issue form needs a `body:` list of fields")
    fields = []
    for item in items:
        item = _mapping(item, path)
        attrs = _mapping(item.get("attributes") or {}, path)
        if item.get("type") == "markdown" or not attrs.get("label"):
            continue  # text shown to the filer, not part of the issue
        label = str(attrs["label"])
        ask = str(attrs.get("description") or attrs.get("placeholder") or "").strip()
        options = attrs.get("options") if isinstance(attrs.get("options"), list) else []
        required = bool(_mapping(item.get("validations") or {}, path).get("required"))
        render = str(attrs.get("render") or "")
        names = tuple(str(o.get("label") if isinstance(o, dict) else o) for o in options or [])
        fields.append(Field(label, role_of(label), ask, names, required, render))
    name = str(header.get("name") or PurePosixPath(path).stem)
    return IssueTemplate(path, name, str(header.get("title") or ""), tuple(fields), True)


def pick_template(templates: list[IssueTemplate], kind: str) -> IssueTemplate | None:
    """The feature-request (kind feature) or bug-report (kind fix) template, by its file name
    or name; None when the upstream has none of that kind."""
    pattern = _KIND_RE[kind]
    for template in sorted(templates, key=lambda t: t.path):
        if pattern.search(PurePosixPath(template.path).stem) or pattern.search(template.name):
            return template
    return None


def issue_title(template: IssueTemplate | None, text: str) -> str:
    """`text` after the template's title prefix ("[bug] ", "[REGRESSION]")."""
    prefix = template.title if template else ""
    if prefix and not prefix.endswith(" "):
        prefix += " "
    return prefix + text


def fill(template: IssueTemplate, answers: dict[str, str]) -> tuple[str, list[str]]:
    """(body, fields left): each field answered by its role where `answers` has one; the
    others keep what the template asks, for the filer."""
    out = [template.preamble] if template.preamble else []
    left = []
    for field in template.fields:
        answer = answers.get(field.role, "").strip() if field.role else ""
        if not answer:
            left.append(field.label + (" (required)" if field.required else ""))
        out += [field.heading or f"### {field.label}", ""]
        out += [_answer(field, answer, template.form), ""]
    return "\n".join(out).strip("\n") + "\n", left


def _answer(field: Field, answer: str, form: bool) -> str:
    """The text under a field: the answer, else the template's own question."""
    if answer:
        # Our answers are Markdown; only quoted output (logs) is a code block.
        return f"```{field.render}\n{answer}\n```" if field.role == "logs" else answer
    if not form:
        return field.ask
    choices = f" One of: {', '.join(field.options)}." if field.options else ""
    return f"<!-- {field.ask}{choices} -->" if field.ask or choices else ""
