"""The upstream commit message and PR body by the upstream's own rules.

The message loses this repository's trailers and gains the contributor's `Signed-off-by`; the
body is the upstream's pull-request template filled with what the patch knows (what it does,
the linked issue, the tests it adds, the patches it needs first), a checklist box ticked only
where that is true. Pure functions over text, so each rule is tested on the real templates
without git; pr/pull_request.py reads the files and makes the branch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

# Trailers meaningful only inside this repository: never in the upstream commit. `Bug:` becomes
# the PR's linked issue, `Upstream-Test:` and `Depends-On:` the body's test and dependency lines,
# `Kind:` (feature | fix) chooses the linked issue's template (pr/issue_draft.py).
OUR_TRAILERS = (
    "upstream-status",
    "upstream-evidence",
    "origin",
    "test",
    "bug",
    "upstream-test",
    "depends-on",
    "kind",
)
SIGNOFF_KEY = "Signed-off-by"
BUG_KEY, DEPENDS_KEY = "Bug", "Depends-On"
TESTS_DIR = "tests"  # a patch's files under the upstream's tests/ are the tests its PR carries
TEMPLATE_DIRS = (".github", "", "docs")  # where GitHub looks for a PR template

_TRAILER_RE = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):[ \t]*(.*)$")
# A patch message ends its prose with when this repository can drop the patch ("Can be dropped
# when upstream ..."): true of our carry, meaningless in the upstream's own history.
_CARRY_NOTE_RE = re.compile(r"^(can be dropped|drop)( it| this( patch)?)? (when|once)\b", re.I)
_TEMPLATE_RE = re.compile(r"^pull_request_template(\.md|\.txt)?$", re.I)
_COMMENT_RE = re.compile(r"<!--.*?-->", re.S)
_BOX_RE = re.compile(r"^(\s*[-*+]\s+)\[ \](\s.*)$")
_WHAT_RE = re.compile(r"^#{1,6}\s*what does this pr do\b", re.I)
_ISSUES_HEADING_RE = re.compile(r"^#{1,6}\s*issues?\s*$", re.I)
_HEADING_RE = re.compile(r"^#{1,6}\s")
_OVERVIEW_RE = re.compile(r"^\W*add a one[- ]line overview\b", re.I)
_CHANGELOG_RE = re.compile(r"^(\s*[-*+]\s+)add specific line[- ]by[- ]line info\b", re.I)
_LINKED_RE = re.compile(r"^(\W*)linked issues?:\s*$", re.I)
_RELATED_RE = re.compile(r"^(\s*[-*+]\s+)?related to #\s*\(issue\)\s*$", re.I)
_SIGNOFF_BOX_RE = re.compile(r"sign(ed)?[- ]?off|\bdco\b", re.I)
_ADDS_TESTS_RE = re.compile(r"\b(add|added|adds|write|wrote|written)\b.*\btests?\b", re.I)
_SENTENCE_END_RE = re.compile(r"[?\[]|\.(\s|$)")


@dataclass(frozen=True)
class Identity:
    """The person opening the PR (git's user.name / user.email): author and sign-off."""

    name: str
    email: str

    @property
    def signoff(self) -> str:
        return f"{SIGNOFF_KEY}: {self.name} <{self.email}>"


@dataclass(frozen=True)
class Dependency:
    """A patch this one needs first (`Depends-On: <Upstream>/<patch>`), as the body names it."""

    upstream: str
    patch: str
    subject: str  # its title upstream: the body names it by that, never by a path of ours
    repo: str  # GitHub owner/name of its upstream ("" when not on GitHub)
    status: str  # its Upstream-Status value
    same_upstream: bool
    stacked_branch: str = ""  # the PR branch this PR is stacked on ("" = not stacked)

    @property
    def pr_url(self) -> str:
        kind, _, detail = self.status.partition(" ")
        return detail if kind == "submitted" else ""


@dataclass(frozen=True)
class PrFacts:
    """What the patch knows that the PR body states."""

    summary: str  # the commit message body without trailers
    files: tuple[tuple[str, str], ...] = ()  # (path, "new" | "changed" | "deleted")
    issues: tuple[str, ...] = ()  # Bug: URLs
    upstream_tests: tuple[str, ...] = ()  # Upstream-Test: pytest node ids
    dependencies: tuple[Dependency, ...] = ()
    signed_off: bool = True
    repo: str = ""  # the upstream's GitHub owner/name: its own issues are closed by the PR

    @property
    def test_files(self) -> list[str]:
        """Files under the upstream's tests/ the patch adds or changes."""
        return [p for p, how in self.files if how != "deleted" and is_test_path(p)]


def is_test_path(path: str) -> bool:
    return PurePosixPath(path).parts[:1] == (TESTS_DIR,)


# --- the commit message -------------------------------------------------------------------


def split_trailers(body: str) -> tuple[str, list[str]]:
    """(text, trailer lines) of a message body: trailers are its last paragraph when every
    line of it is `Key: value` (the rule series.py and git interpret-trailers share)."""
    lines = body.rstrip("\n").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    start = len(lines)
    while start and lines[start - 1].strip():
        start -= 1
    block = lines[start:]
    if not block or not all(_TRAILER_RE.match(x) for x in block):
        return "\n".join(lines).strip("\n"), []
    return "\n".join(lines[:start]).strip("\n"), block


def drop_carry_notes(text: str) -> str:
    """`text` without the paragraphs saying when this repository drops the patch."""
    paragraphs = re.split(r"\n[ \t]*\n", text.strip("\n"))
    return "\n\n".join(p for p in paragraphs if not _CARRY_NOTE_RE.match(p.lstrip()))


def _key(trailer: str) -> str:
    return trailer.split(":", 1)[0].strip().lower()


def upstream_message(subject: str, body: str, identity: Identity, patch_author: str) -> str:
    """The upstream commit message: our trailers and carry note out, the patch author's sign-off
    (the identity the contributor replaces) out, other trailers kept, the contributor's sign-off
    last."""
    text, trailers = split_trailers(body)
    text = drop_carry_notes(text)
    kept = []
    for line in trailers:
        key = _key(line)
        if key in OUR_TRAILERS or line == identity.signoff:
            continue
        if key == SIGNOFF_KEY.lower() and patch_author and f"<{patch_author}>" in line:
            continue
        kept.append(line)
    block = "\n".join([*kept, identity.signoff])
    return f"{subject}\n\n{text}\n\n{block}\n" if text else f"{subject}\n\n{block}\n"


# --- the template ---------------------------------------------------------------------------


def pick_template(paths: list[str]) -> str:
    """The PR template GitHub would offer among `paths` (repository-relative), "" if none.

    A file named pull_request_template(.md) in .github/, the root or docs/ (any case, in that
    order), else the first (sorted) file of a .github/PULL_REQUEST_TEMPLATE/ directory.
    """
    for folder in TEMPLATE_DIRS:
        for path in sorted(paths):
            parent = str(PurePosixPath(path).parent)
            if (parent if parent != "." else "").lower() == folder and _TEMPLATE_RE.match(
                PurePosixPath(path).name
            ):
                return path
    in_dir = [
        p
        for p in sorted(paths)
        if str(PurePosixPath(p).parent).lower() == ".github/pull_request_template"
        and p.lower().endswith((".md", ".txt"))
    ]
    return in_dir[0] if in_dir else ""


def strip_comments(text: str) -> str:
    """The template without `<!-- ... -->` comments (a line left empty by one is dropped)."""
    out = []
    for line in _COMMENT_RE.sub("\0", text).split("\n"):
        if "\0" in line:
            line = line.replace("\0", "").rstrip()
            if not line.strip():
                continue
        out.append(line)
    return "\n".join(out)


def fill_template(template: str, facts: PrFacts) -> str:
    """The template with the summary, issue, changes and true boxes filled in."""
    lines = strip_comments(template).split("\n")
    lines, issues_placed = _place_issues(lines, facts)
    lines = _place_summary(lines, facts_block(facts, issues_placed=issues_placed))
    lines = _place_changes(lines, facts)
    lines = [_tick(line, facts) for line in lines]
    return _tidy(lines)


def _tidy(lines: list[str]) -> str:
    """At most one blank line in a row, none at either end, one final newline."""
    out: list[str] = []
    for line in lines:
        if not line.strip() and (not out or not out[-1].strip()):
            continue
        out.append(line.rstrip() if not line.strip() else line)
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out) + "\n"


def _place_summary(lines: list[str], block: list[str]) -> list[str]:
    """In place of the "add a one line overview" placeholder, else under "What does this PR
    do", else at the top."""
    at = next((i for i, x in enumerate(lines) if _OVERVIEW_RE.match(x)), -1)
    if at >= 0:
        return [*lines[:at], "", *block, "", *lines[at + 1 :]]
    at = next((i for i, x in enumerate(lines) if _WHAT_RE.match(x)), -1)
    if at >= 0:
        return [*lines[: at + 1], "", *block, "", *lines[at + 1 :]]
    return [*block, "", *lines]


def _issue_verb(url: str, facts: PrFacts) -> str:
    own = bool(facts.repo) and url.startswith(f"https://github.com/{facts.repo}/issues/")
    return "Closes" if own else "Related to"


def _place_issues(lines: list[str], facts: PrFacts) -> tuple[list[str], bool]:
    """The Bug: URLs where the template asks for the linked issue; (lines, placed)."""
    if not facts.issues:
        return lines, False
    for i, line in enumerate(lines):
        linked = _LINKED_RE.match(line)
        if linked:
            refs = ", ".join(facts.issues)
            return [*lines[:i], f"{linked.group(1)}Linked issue: {refs}", *lines[i + 1 :]], True
        related = _RELATED_RE.match(line)
        if related:
            bullet = related.group(1) or "- "
            refs = [f"{bullet}Related to {url}" for url in facts.issues]
            return [*lines[:i], *refs, *lines[i + 1 :]], True
    for i, line in enumerate(lines):
        if _ISSUES_HEADING_RE.match(line):
            end = i + 1
            while end < len(lines) and lines[end].strip() and not _HEADING_RE.match(lines[end]):
                end += 1  # the heading's own instructions stay above the list
            refs = [f"- {_issue_verb(url, facts)} {url}" for url in facts.issues]
            return [*lines[:end], "", *refs, "", *lines[end:]], True
    return lines, False


def _place_changes(lines: list[str], facts: PrFacts) -> list[str]:
    """One line per file the patch touches in place of a changelog placeholder."""
    verbs = {"new": "Adds", "changed": "Changes", "deleted": "Deletes"}
    for i, line in enumerate(lines):
        match = _CHANGELOG_RE.match(line)
        if match and facts.files:
            items = [f"{match.group(1)}{verbs[how]} `{path}`" for path, how in facts.files]
            return [*lines[:i], *items, *lines[i + 1 :]]
    return lines


def _tick(line: str, facts: PrFacts) -> str:
    """`- [ ]` becomes `- [x]` only where the box states something the patch makes true."""
    match = _BOX_RE.match(line)
    if not match:
        return line
    label = match.group(2)
    claim = _SENTENCE_END_RE.split(label, maxsplit=1)[0]  # the box's own question, not its links
    if _SIGNOFF_BOX_RE.search(claim):
        true = facts.signed_off
    elif _ADDS_TESTS_RE.search(claim):
        true = "functional" not in claim.lower() and bool(facts.test_files)
    else:
        true = False
    return f"{match.group(1)}[x]{label}" if true else line


# --- what the body says ---------------------------------------------------------------------


def facts_block(facts: PrFacts, *, issues_placed: bool) -> list[str]:
    """The summary, then the tests, the issue (where the template has no place for it) and the
    dependencies, as Markdown lines."""
    out = [facts.summary.strip(), ""] if facts.summary.strip() else []
    tests = test_lines(facts)
    if tests:
        out += ["**Tests**", "", *tests, ""]
    if facts.issues and not issues_placed:
        out += ["**Issue**", "", *[f"- {_issue_verb(u, facts)} {u}" for u in facts.issues], ""]
    if facts.dependencies:
        out += ["**Depends on**", "", *[f"- {dependency_line(d)}" for d in facts.dependencies]]
    return out


def test_lines(facts: PrFacts) -> list[str]:
    """The Upstream-Test nodes, then the test files the patch touches that no node names."""
    named = {node.split("::", 1)[0] for node in facts.upstream_tests}
    new = {p for p, how in facts.files if how == "new"}
    out = [f"- `{node}`" for node in facts.upstream_tests]
    for path in facts.test_files:
        if path not in named:
            out.append(f"- `{path}` ({'new file' if path in new else 'changed'})")
    return out


def dependency_line(dep: Dependency) -> str:
    """One sentence naming the patch needed first, by its title, with its PR where known."""
    kind, _, detail = dep.status.partition(" ")
    name = f'"{dep.subject}"'
    state = {"submitted": detail, "accepted": f"merged as {detail}"}.get(kind, "PR not opened yet")
    if dep.stacked_branch:
        return (
            f"Stacked on {name} ({state}; branch `{dep.stacked_branch}`): this branch contains "
            "that commit too; review the last commit only."
        )
    if not dep.same_upstream:
        tail = "" if kind == "accepted" else ", which must land there first"
        return f"Needs {name} in {dep.repo or dep.upstream} ({state}){tail}."
    if kind == "accepted":
        return f"Needs {name} ({state})."
    return f"Needs {name} ({state}) merged first; this PR does not contain it."
