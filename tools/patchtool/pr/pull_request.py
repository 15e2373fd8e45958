"""`open-pr PATCH`: turn a patch file into the upstream PR a contributor would open by hand.

In the upstream checkout a branch is made from the PR's base (the upstream branch, `--onto` a
commit, or with `--stack` the PR branch of the patch this one `Depends-On`): the patch applied
as `git am` would, in a temporary index (the checkout's HEAD, index and files untouched), its
tree committed as the contributor's own: authored by git's user.name/user.email, this
repository's trailers out, the contributor's `Signed-off-by` in (pr/pr_template.py). The
patch applied is its port onto main (model/ports.py) when the PR targets main and has one. The
title is the subject, checked against the upstream's title convention (pr/pr_title.py); the
body is the upstream's PR template filled with what the patch knows (without one: the message
and the tripwire test; pr/pr_body.py). Beside it the linked issue is drafted from the
upstream's issue template (pr/linked_issue.py); `--push` opens it first. The `gh issue
create`, `git push` and `gh pr create` commands are printed as argument lists (`shlex.join` is
for display only); `--push` runs them as lists, so no byte of the patch ever reaches a shell.
Without `--push` nothing leaves the machine.
"""

from __future__ import annotations

import re
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import GitError, PatchToolError
from ..git.gh import gh_executable, gh_url
from ..git.git import git, git_text, rev, run
from ..model.manifest import Upstream, load_manifest
from ..model.ports import pr_port
from ..model.series import Patch, parse_patch
from ..model.test_suites import UPSTREAM_TEST_KEY
from ..source.checkout import checkout_dir, is_real_clone, is_repo, standin_spec
from .linked_issue import (
    LinkedIssue,
    draft_issue,
    find_gh,
    issue_notes,
    open_issue,
    record_issue,
)
from .patch_status import locate_patch, set_status
from .pr_body import body_path, write_body
from .pr_sources import (
    BRANCH_PREFIX,
    contributor,
    github_repo,
    load_dependencies,
    read_convention,
    stack_base,
)
from .pr_template import (
    BUG_KEY,
    Dependency,
    Identity,
    PrFacts,
    split_trailers,
    upstream_message,
)
from .pr_title import title_notes


@dataclass
class PullRequest:
    patch: str
    upstream: str
    branch: str
    start: str
    commit: str
    title: str
    body_file: str
    base: str = "main"  # the branch the PR targets (a stacked PR: its dependency's PR branch)
    template: str = ""  # the upstream's PR template the body fills ("" = none)
    port: str = ""  # the port onto main applied instead of the patch ("" = the patch itself)
    push: list[str] = field(default_factory=list)
    gh: list[str] = field(default_factory=list)
    pushed: bool = False
    url: str = ""
    notes: list[str] = field(default_factory=list)
    failed: str = ""  # set when a step after the push failed: what was done, what is left
    issue: LinkedIssue = field(default_factory=LinkedIssue)  # the linked issue's draft


def _start_point(repo: Path, remote: str, base: str, onto: str = "") -> str:
    """The commit the PR branch starts at: `onto` when given, else `<remote>/<base>`."""
    if onto:
        sha = rev(repo, f"{onto}^{{commit}}")
        if not sha:
            raise PatchToolError(f"{repo}: --onto {onto}: no such commit here; fetch it first")
        return sha
    for name in (f"refs/remotes/{remote}/{base}", f"refs/remotes/origin/{base}", base):
        sha = rev(repo, f"{name}^{{commit}}")
        if sha:
            return sha
    raise PatchToolError(
        f"{repo}: no {remote}/{base} or {base} to branch from; fetch it "
        f"(git -C {repo} fetch {remote} {base}) or pass --onto <commit it applies to>"
    )


def _identity_env(who: Identity) -> dict[str, str]:
    return {
        "GIT_AUTHOR_NAME": who.name,
        "GIT_AUTHOR_EMAIL": who.email,
        "GIT_COMMITTER_NAME": who.name,
        "GIT_COMMITTER_EMAIL": who.email,
    }


def _apply(repo: Path, start: str, patch_file: Path, hint: str) -> tuple[str, str, str]:
    """(tree, subject, body) of the patch applied to `start` as `git am` would (`git mailinfo -k`,
    then `git apply` without fuzz), in a temporary index: no work tree is checked out, so the
    checkout is untouched and one lacking some blobs (a partial mirror) still works."""
    with tempfile.TemporaryDirectory(prefix="open-pr-") as tmp:
        msg, diff, index = (Path(tmp) / name for name in ("msg", "diff", "index"))
        info = git(["mailinfo", "-k", str(msg), str(diff)], repo, input=patch_file.read_bytes())
        env = {"GIT_INDEX_FILE": str(index)}
        git(["read-tree", start], repo, env=env)
        try:
            git(["apply", "--cached", str(diff)], repo, env=env)
        except GitError as exc:
            raise PatchToolError(
                f"{patch_file.name} does not apply to {start[:12]} ({exc.stderr.strip()[:200]}); "
                + (
                    hint
                    or "rebase the series onto it first (tools/patches rebase ... --to <ref>) "
                    "or pass --onto <commit it applies to>"
                )
            ) from exc
        tree = git_text(["write-tree"], repo, env=env)
        body = git(["stripspace"], repo, input=msg.read_bytes())
    # With -k a folded subject comes back as several `Subject:` lines; am joins them by newlines
    # (the message's first paragraph, which `%s` shows as one line).
    subject = "\n".join(x[9:] for x in info.split("\n") if x.startswith("Subject: "))
    return tree, subject.strip(), body


def pr_commit(
    repo: Path, start: str, branch: str, patch: Patch, who: Identity, force: bool, hint: str = ""
) -> str:
    """The PR commit on `start`, the patch's change as the contributor's own commit (author,
    committer and sign-off: `who`; our trailers out). No ref moves yet: the linked issue is
    opened (--push) before anything changes."""
    existing = rev(repo, f"refs/heads/{branch}")
    if existing and not force:
        raise PatchToolError(
            f"{repo}: branch {branch} exists ({existing[:12]}); pass --force to rebuild it "
            f"or --branch <other name>"
        )
    env = _identity_env(who)
    tree, subject, body = _apply(repo, start, patch.path, hint)
    message = upstream_message(subject, body, who, patch.author_email)
    return git_text(["commit-tree", tree, "-p", start], repo, input=message, env=env)


def _facts(
    patch: Patch, body: str, deps: list[Dependency], repo: str, issue: LinkedIssue
) -> PrFacts:
    files = tuple(
        (f.path, "deleted" if f.is_deleted else "new" if f.is_new else "changed")
        for f in patch.files
    )
    return PrFacts(
        summary=split_trailers(body)[0],
        files=files,
        issues=(*patch.trailer_values(BUG_KEY), *([issue.url] if issue.url else [])),
        upstream_tests=tuple(patch.trailer_values(UPSTREAM_TEST_KEY)),
        dependencies=tuple(deps),
        signed_off=True,
        repo=repo,
    )


def _checked_patch(root: Path, given: str) -> tuple[Path, Upstream, Path, Patch]:
    """(patch file, upstream, checkout, parsed patch); refuse a stand-in or a broken patch."""
    loc = locate_patch(root, given)
    up: Upstream = loc.upstream
    repo = checkout_dir(root, up)
    standin = is_repo(repo) and bool(standin_spec(repo))
    if not is_real_clone(repo):
        raise PatchToolError(
            f"{up.path}: open-pr needs a git clone of {up.url} (this is "
            f"{'a release stand-in' if standin else 'no checkout'}); run git submodule update --init {up.path}"
        )
    return loc.path, up, repo, _parsed(loc.path)


def _parsed(path: Path) -> Patch:
    """The patch (or its port), refused when it does not parse cleanly."""
    patch = parse_patch(path)
    if patch.problems:
        line, why = patch.problems[0]
        raise PatchToolError(f"{path}:{line}: {why}; fix the patch first (tools/patches lint)")
    return patch


def _notes(facts: PrFacts, body: str, stacked: Dependency | None, fork: bool) -> list[str]:
    """What the contributor should know before pushing."""
    notes = []
    open_boxes = len(re.findall(r"^\s*[-*+]\s+\[ \]", body, re.M))
    if open_boxes:
        notes.append(f"{open_boxes} checklist box(es) of the template left for you to answer")
    if not facts.test_files:
        notes.append(
            f"the patch adds no test under the upstream's tests/: the PR carries none "
            f"(add one to the patch and name it in `{UPSTREAM_TEST_KEY}:`)"
        )
    same = [d for d in facts.dependencies if d.same_upstream]
    if same and not stacked:
        names = ", ".join(d.patch for d in same)
        notes.append(
            f"depends on {names} (same upstream): the body says so; --stack opens it on top"
        )
    if stacked:
        notes.append(
            f"stacked on {stacked.stacked_branch}: push that branch first (its open-pr --push did)"
        )
        if fork:
            notes.append(
                "GitHub needs the base branch in the upstream repository itself: from a fork, "
                "retarget the PR to main once the dependency merges"
            )
    return notes


def open_pr(
    root: Path,
    given: str,
    *,
    remote: str = "origin",
    base: str = "main",
    branch: str = "",
    push: bool = False,
    force: bool = False,
    stack: bool = False,
    onto: str = "",
    gh: str | None = None,
    related: list[str] | None = None,
) -> PullRequest:
    """The PR branch, title and body of patch `given`; `related`: upstream PRs (one line each)
    the body names so the maintainer sees them."""
    patch_path, up, repo, patch = _checked_patch(root, given)
    who = contributor(repo, up)
    deps = load_dependencies(root, patch, up, load_manifest(root))
    where = (remote, base, onto)
    start, pr_base, stacked, deps = _plan_base(root, repo, up, patch, deps, where, stack)
    branch = branch or BRANCH_PREFIX + patch_path.stem
    port = pr_port(patch_path, base, onto)
    if port:
        patch = _parsed(port)
    head = pr_commit(repo, start, branch, patch, who, force, _apply_hint(deps, stacked))
    body_file = body_path(root, up, patch)
    issue = draft_issue(up, repo, start, patch, body_file)
    remote_url = git_text(["remote", "get-url", remote], repo, check=False)
    rel = patch_path.relative_to(root.resolve()).as_posix()
    recorded = (
        _open_issue_first(root, rel, issue, repo, (up, remote, remote_url), gh) if push else []
    )
    git(["update-ref", "-m", "tools/patches open-pr", f"refs/heads/{branch}", head], repo)
    title = git_text(["log", "-1", "--format=%s", head], repo)
    message_body = git(["log", "-1", "--format=%b", head], repo)
    facts = _facts(patch, message_body, deps, github_repo(up.url), issue)
    template, body = write_body(body_file, repo, start, facts, patch, root)
    if related:
        body = body.rstrip("\n") + "\n\nRelated open upstream PRs on the same lines:\n"
        body += "".join(f"- {line}\n" for line in related)
        body_file.write_text(body, encoding="utf-8")
    fork = github_repo(remote_url)
    pr = PullRequest(rel, up.name, branch, start, head, title, str(body_file), pr_base, template)
    pr.port, pr.issue = (port.relative_to(root.resolve()).as_posix() if port else ""), issue
    pr.push = ["git", "-C", str(repo), "push", remote, f"{head}:refs/heads/{branch}"]
    pr.gh = _gh_command(up, fork, pr)
    advice = title_notes(title, read_convention(repo, start))
    advice += _notes(facts, body, stacked, bool(fork) and fork != github_repo(up.url))
    advice += issue_notes(issue, recorded)
    pr.notes = [f"note: {line}" for line in advice]
    if not push:
        pr.notes.append("nothing pushed (pass --push to run the commands above)")
        return pr
    return _push_and_create(root, pr, repo, remote, gh)


def _open_issue_first(
    root: Path,
    rel: str,
    issue: LinkedIssue,
    repo: Path,
    where: tuple[Upstream, str, str],
    gh: str | None,
) -> list[str]:
    """--push: refuse what cannot be pushed, then open the drafted issue and record its URL in
    `Bug:`, before any ref moves (a failure here changes nothing); what changed."""
    up, remote, remote_url = where
    if not remote_url:
        raise PatchToolError(
            f"{up.path}: no remote {remote!r}; add your fork: git -C {up.path} remote add {remote} <url>"
        )
    if not issue.file:
        return []
    issue.url = open_issue(issue, repo, find_gh(gh))
    return record_issue(root, rel, issue.url)


def _plan_base(
    root: Path,
    repo: Path,
    up: Upstream,
    patch: Patch,
    deps: list[Dependency],
    where: tuple[str, str, str],
    stack: bool,
) -> tuple[str, str, Dependency | None, list[Dependency]]:
    """(start commit, PR base branch, the dependency stacked on, deps with it marked);
    `where`: (remote, base branch, --onto commit or "")."""
    remote, base, onto = where
    if not stack:
        return _start_point(repo, remote, base, onto), base, None, deps
    if onto:
        raise PatchToolError(
            "--stack and --onto exclude each other: a stacked PR starts at its dependency's "
            "PR branch"
        )
    stacked = stack_base(root, repo, up, patch, deps)
    deps = [stacked if d.same_upstream and d.patch == stacked.patch else d for d in deps]
    return rev(repo, f"refs/heads/{stacked.stacked_branch}"), stacked.stacked_branch, stacked, deps


def _apply_hint(deps: list[Dependency], stacked: Dependency | None) -> str:
    """What to do when a patch that needs an earlier one does not apply without it."""
    same = [d.patch for d in deps if d.same_upstream]
    if stacked or not same:
        return ""
    return f"it Depends-On {', '.join(same)}: open that PR first, then this one with --stack"


def _gh_command(up: Upstream, fork: str, pr: PullRequest) -> list[str]:
    """`gh pr create` for `pr` as an argument list (`--head owner:branch` from a fork)."""
    upstream_repo = github_repo(up.url)
    head_arg = f"{fork.split('/')[0]}:{pr.branch}" if fork and fork != upstream_repo else pr.branch
    cmd = ["gh", "pr", "create", "--base", pr.base, "--head", head_arg, "--title", pr.title]
    cmd += ["--body-file", pr.body_file]
    if upstream_repo:
        cmd[3:3] = ["--repo", upstream_repo]
    return cmd


def _push_and_create(
    root: Path,
    pr: PullRequest,
    repo: Path,
    remote: str,
    gh: str | None,
) -> PullRequest:
    """Push the branch, then `gh pr create` and record the PR URL in the patch (--push)."""
    patch_rel, branch, head, push_cmd, gh_cmd = pr.patch, pr.branch, pr.commit, pr.push, pr.gh
    proc = run(push_cmd[3:], repo)
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()
        raise PatchToolError(
            f"git push to {remote} failed: {tail[-1] if tail else proc.returncode}"
        )
    pr.pushed = True
    gh_path = gh_executable(gh)
    if not gh_path:
        pr.notes.append(
            "gh not found: open the PR with the gh command above (or the web UI), then run "
            f"tools/patches set-status {patch_rel} submitted <PR URL>"
        )
        return pr
    url, why = gh_url(gh_path, gh_cmd[1:], repo)
    if not url:
        pr.failed = (
            f"gh pr create failed ({why}). Done: pushed {branch} to {remote} "
            f"({head[:12]}). left to do: {shlex.join(gh_cmd)}; then tools/patches set-status "
            f"{patch_rel} submitted <PR URL>"
        )
        return pr
    pr.url = url
    set_status(root, patch_rel, "submitted", pr.url)
    pr.notes.append(f"recorded Upstream-Status: submitted {pr.url} in {patch_rel}")
    return pr
