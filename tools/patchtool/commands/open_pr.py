"""`tools/patches open-pr PATCH [--stack] [--push]`: the upstream PR a contributor would open
by hand, from a patch (pr/pull_request.py): the commit authored and signed off by you, the
body the upstream's PR template filled in, and beside it the linked issue drafted from the
upstream's issue template (pr/linked_issue.py). For base main a patch's port onto main
(patches/<Upstream>/main/, model/ports.py) is opened in its place. Prints the branch, the port
used, title, body file, issue draft, notes and the push/gh commands; with --push opens the
issue first (its URL into `Bug:` and the body), runs them and records
`Upstream-Status: submitted <URL>`. Before any of it, the upstream PRs on the patch's lines are read (prs/scan.py, from
--prs-from or the checkout's `refs/pull/*`): an open PR making the same fix stops it, naming the
PR, unless --despite-pr N; open same-fix and conflicting PRs are named in the PR body.
Exit OK, or an `error:` line.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ..command import Command, root_of
from ..errors import ExitCode, PatchToolError
from ..pr.pr_sources import BRANCH_PREFIX
from ..pr.pull_request import PullRequest, open_pr
from ..prs.history import OPEN
from ..prs.lines import NEARBY, SAME_FIX
from ..prs.scan import run_scan


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("patch", metavar="PATCH", help="patches/<Upstream>/<name>.patch")
    parser.add_argument(
        "--push",
        action="store_true",
        help="run gh issue create (unless the patch has Bug:), git push and gh pr create",
    )
    parser.add_argument("--remote", default="origin", help="remote to push to (your fork)")
    parser.add_argument("--base", default="main", help="upstream branch the PR targets")
    parser.add_argument(
        "--onto",
        default="",
        metavar="COMMIT",
        help="start the PR branch here instead of <remote>/<base> (e.g. the pin, offline)",
    )
    parser.add_argument("--branch", default="", help=f"default: {BRANCH_PREFIX}<patch name>")
    parser.add_argument("--force", action="store_true", help="rebuild an existing PR branch")
    parser.add_argument(
        "--stack",
        action="store_true",
        help="open it on top of the PR branch of the same-upstream patch it Depends-On (made "
        "by an earlier open-pr), with that branch as the PR base, as ghstack does",
    )
    parser.add_argument(
        "--prs-from",
        default="",
        metavar="GITDIR",
        help="git dir with the upstream's refs/pull/* (default: the checkout, where it has them)",
    )
    parser.add_argument("--gh-json", default="", metavar="FILE", help="as for `prs`")
    parser.add_argument(
        "--despite-pr",
        type=int,
        action="append",
        default=[],
        metavar="N",
        help="open it although open upstream PR #N makes the same fix (repeatable)",
    )


def _related(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(PR body lines naming the open same-fix/conflicting upstream PRs, notes); refuses when an
    open PR makes the same fix and --despite-pr does not name it."""
    root = root_of(args)
    patch, upstream = Path(args.patch).name, Path(args.patch).parent.name
    try:
        result = run_scan(root, upstream, args.prs_from, args.gh_json)
    except PatchToolError as exc:
        if args.prs_from or args.gh_json:
            raise
        return [], [f"note: upstream PRs not checked ({exc})"]
    hits = next((p.hits for p in result.patches if p.name == patch), [])
    mine = [h for h in hits if h.state.state == OPEN and h.verdict != NEARBY and not h.named]
    for hit in mine:
        if hit.verdict == SAME_FIX and hit.number not in args.despite_pr:
            raise PatchToolError(
                f"open upstream PR #{hit.number} makes the same fix as {patch} "
                f"({hit.state.text()}); review it there, or pass --despite-pr {hit.number} to "
                "open ours anyway"
            )
    lines = [f"#{h.number} ({h.verdict}, {h.state.text()})" for h in mine]
    return lines, [f"note: checked {result.heads} upstream PRs; {len(mine)} open on its lines"]


def _run(args: argparse.Namespace) -> int:
    related, checked = _related(args)
    pr = open_pr(
        root_of(args),
        args.patch,
        remote=args.remote,
        base=args.base,
        branch=args.branch,
        push=args.push,
        force=args.force,
        stack=args.stack,
        onto=args.onto,
        related=related,
    )
    pr.notes[:0] = checked
    print(f"branch {pr.branch} at {pr.commit[:12]} (from {pr.start[:12]}) in {pr.upstream}")
    print(f"base:  {pr.base}")
    if pr.port:
        print(
            f"port:  {pr.port} (the patch resolved onto main, where the pin patch does not apply)"
        )
    print(f"title: {pr.title}")
    where = f"filled {pr.template}" if pr.template else "the upstream has no PR template"
    print(f"body:  {pr.body_file} ({where})")
    _print_issue(pr)
    print("push:  " + shlex.join(pr.push))
    print("pr:    " + shlex.join(pr.gh))
    for note in pr.notes:
        print(note)
    if pr.url:
        print(f"opened: {pr.url}")
    if pr.failed:
        print(f"error: {pr.failed}", file=sys.stderr)
        return ExitCode.FAILED
    return ExitCode.OK


def _print_issue(pr: PullRequest) -> None:
    """The issue draft and its gh command (none when the patch's Bug: links one)."""
    issue = pr.issue
    if not issue.file or not issue.kind:
        return
    source = issue.template or "no template of that kind upstream: a plain draft"
    print(f"issue: {issue.file} ({issue.kind.template_kind}, {source}; {issue.kind.rule})")
    print("       " + shlex.join(issue.gh))


OPEN_PR = Command(
    "open-pr", "make an upstream PR branch, title and body from a patch", _configure, _run
)
