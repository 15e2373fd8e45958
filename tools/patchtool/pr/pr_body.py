"""The PR body file `open-pr` writes: the upstream's PR template filled (pr/pr_template.py),
or, where the upstream has none, the message, the upstream test and issue, and the tripwire
test inlined (never a path of ours). Beside it, `<name>.issue.md`: the linked issue's draft
(pr/linked_issue.py).
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from ..model.manifest import Upstream
from ..model.series import Patch
from .pr_sources import read_template
from .pr_template import PrFacts, facts_block, fill_template

PR_DIR = Path(".cache") / "pr"


def body_path(root: Path, up: Upstream, patch: Patch) -> Path:
    """`.cache/pr/<Upstream>-<name>.md` (its folder made)."""
    path = root / PR_DIR / f"{up.name}-{patch.path.stem}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_body(
    body_file: Path, repo: Path, start: str, facts: PrFacts, patch: Patch, root: Path
) -> tuple[str, str]:
    """(template path, body): the upstream's template at `start` filled, else the plain body."""
    template, text = read_template(repo, start)
    body = fill_template(text, facts) if template else pr_body(facts, patch, root)
    body_file.write_text(body, encoding="utf-8")
    return template, body


def test_source(root: Path, node: str) -> str:
    """The source of test `path::name` (or `path::Class::name`) in this repository, else "".

    Inlined in a template-less PR body so reviewers see the test itself, not a path of ours.
    """
    path, _, name = node.partition("::")
    file = root / path
    if not name or not file.is_file():
        return ""
    text = file.read_text(encoding="utf-8", errors="replace")
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return ""
    body: list[ast.stmt] = tree.body
    found: ast.stmt | None = None
    for part in name.split("::"):
        found = next(
            (
                n
                for n in body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.name == part.split("[", 1)[0]
            ),
            None,
        )
        if found is None:
            return ""
        body = getattr(found, "body", [])
    segment = ast.get_source_segment(text, found, padded=False) if found else None
    return textwrap.dedent(segment) if segment else ""


def pr_body(facts: PrFacts, patch: Patch, root: Path) -> str:
    """The body where the upstream has no PR template: the message without trailers, the
    upstream test, issue and dependencies, and the tripwire test inlined (never a path of ours)."""
    out = [*facts_block(facts, issues_placed=False), ""]
    tests = [] if facts.test_files or facts.upstream_tests else patch.trailer_values("Test")
    if tests:
        out += ["## Test", ""]
    for node in tests:
        source = test_source(root, node)
        name = node.rpartition("::")[2]
        if source:
            out += [
                f"`{name}` fails on the unpatched upstream, passes with this change:",
                "",
                "```python",
                source.rstrip("\n"),
                "```",
                "",
            ]
        else:
            out += [
                f"A regression test (`{name}`) fails on the unpatched upstream, passes with "
                "this change.",
                "",
            ]
    return "\n".join(out).strip("\n") + "\n"
