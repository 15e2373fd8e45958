"""The issue `open-pr` drafts for the PR to link, and with `--push` opens first.

Megatron-LM's PR template requires a linked issue for a new feature from a community
contributor and recommends one for a fix, so the issue is drafted from the upstream's own issue
template at the PR base (pr/issue_template.py), as the patch decides feature or fix
(pr/issue_draft.py), and written beside the PR body (`.cache/pr/<Upstream>-<name>.issue.md`).
A patch with a `Bug:` trailer already links its issue: nothing is drafted (a second `--push`
never opens a second issue). `--push` runs `gh issue create` as an argument list before
anything else changes; its URL becomes the patch's `Bug:` trailer (pin patch, port and branch
`patched` in step, pr/patch_status.set_trailer) and so the PR body's linked issue.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PatchToolError
from ..git.gh import gh_executable, gh_url
from ..model.manifest import Upstream
from ..model.series import Patch
from ..model.test_suites import UPSTREAM_TEST_KEY
from ..model.trailers import KIND_KEY
from .issue_draft import (
    IssueKind,
    answers,
    description,
    draft_text,
    issue_kind,
    message_parts,
)
from .issue_template import issue_title as titled
from .issue_template import pick_template
from .patch_status import set_trailer
from .pr_sources import github_repo, read_issue_templates
from .pr_template import BUG_KEY

ISSUE_SUFFIX = ".issue.md"


@dataclass
class LinkedIssue:
    """The drafted issue (file "" when the patch already links one in `existing`)."""

    file: str = ""
    title: str = ""
    template: str = ""  # the issue template filled ("" = a plain draft)
    kind: IssueKind | None = None
    left: list[str] = field(default_factory=list)  # fields left for the filer
    gh: list[str] = field(default_factory=list)
    existing: tuple[str, ...] = ()  # the patch's Bug: values
    url: str = ""  # set once --push opened it


def draft_issue(up: Upstream, repo: Path, start: str, patch: Patch, body_file: Path) -> LinkedIssue:
    """The issue draft for `patch` from the upstream's templates at `start`, written beside
    `body_file`; none when the patch has a `Bug:` trailer."""
    existing = tuple(patch.trailer_values(BUG_KEY))
    if existing:
        return LinkedIssue(existing=existing)
    kind = issue_kind(patch.subject, patch.trailer_values(KIND_KEY))
    template = pick_template(read_issue_templates(repo, start), kind.kind)
    body = "\n".join(text for _, text in patch.body)
    parts = message_parts(body)
    by_role = answers(kind.kind, patch.subject, parts, patch.trailer_values(UPSTREAM_TEST_KEY))
    text, left = draft_text(template, kind, by_role)
    file = body_file.with_name(body_file.name.removesuffix(".md") + ISSUE_SUFFIX)
    file.write_text(text, encoding="utf-8")
    title = titled(template, description(patch.subject))
    issue = LinkedIssue(str(file), title, template.path if template else "", kind, left)
    issue.gh = gh_issue_command(up, title, str(file))
    return issue


def gh_issue_command(up: Upstream, title: str, body_file: str) -> list[str]:
    """`gh issue create` as an argument list (`--repo` where the upstream is on GitHub)."""
    upstream_repo = github_repo(up.url)
    where = ["--repo", upstream_repo] if upstream_repo else []
    return ["gh", "issue", "create", *where, "--title", title, "--body-file", body_file]


def find_gh(gh: str | None) -> str:
    """The gh executable; refuse (nothing changed yet) when there is none."""
    found = gh_executable(gh)
    if not found:
        raise PatchToolError(
            "--push opens the linked issue with gh first, and gh is not installed: nothing "
            "pushed; install gh (https://cli.github.com) or run without --push"
        )
    return found


def open_issue(issue: LinkedIssue, repo: Path, gh_path: str) -> str:
    """Run `gh issue create`; its URL, or one line saying it failed and nothing changed."""
    url, why = gh_url(gh_path, issue.gh[1:], repo)
    if not url:
        raise PatchToolError(
            f"gh issue create failed ({why}): nothing pushed, no issue opened; the draft is "
            f"{issue.file} (rerun when gh works: {shlex.join(issue.gh)})"
        )
    return url


def record_issue(root: Path, patch_rel: str, url: str) -> list[str]:
    """The issue URL as the patch's `Bug:` trailer; what changed."""
    return set_trailer(root, patch_rel, BUG_KEY, url)


def issue_notes(issue: LinkedIssue, recorded: list[str]) -> list[str]:
    """What the contributor should know of the linked issue."""
    if issue.existing:
        return [f"linked issue: {', '.join(issue.existing)} (the patch's Bug: trailer)"]
    notes = []
    if issue.left:
        notes.append(
            f"{len(issue.left)} field(s) of the issue template left for you to fill: {', '.join(issue.left)}"
        )
    if issue.url:
        notes.append(
            f"opened issue {issue.url}; recorded Bug: {issue.url} in {', '.join(recorded)}"
        )
    else:
        notes.append(
            "the PR body's linked issue stays empty until the issue is open: open it (issue "
            "command above) and add `Bug: <issue URL>` to the patch, or let --push do both"
        )
    return notes
