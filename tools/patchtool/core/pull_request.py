"""`open-pr PATCH`: turn a patch file into an upstream PR branch, title and body.

In the upstream checkout (never its work tree: a temporary worktree is used) a branch is
made from the upstream base and the patch is applied with `git am`; the PR title is the
subject, the body the commit message (why, how tested, when it can be dropped) plus the
tripwire test. The `git push` and `gh pr create` commands are printed as argument lists
(`shlex.join` is for display only); `--push` runs them as lists, so no byte of the patch
ever reaches a shell. Without `--push` nothing leaves the machine.
"""

from __future__ import annotations

import ast
import re
import shlex
import shutil
import subprocess
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import GitError, PatchToolError
from .checkout import checkout_dir, is_real_clone, is_repo, standin_spec
from .git import git, git_ok, git_text, rev, run
from .manifest import Upstream
from .patch_status import locate_patch, set_status
from .series import Patch, parse_patch

BRANCH_PREFIX = "mcore-rl-stack/"
PR_DIR = Path(".cache") / "pr"
# Trailers meaningful only inside this repository (Origin: names us, Test: a path of ours);
# upstream reviewers do not need them.
INTERNAL_TRAILERS = ("upstream-status", "upstream-evidence", "origin", "test")
_GITHUB_RE = re.compile(r"github\.com[:/]([^/]+)/([^/]+?)(?:\.git)?/?$")


@dataclass
class PullRequest:
    patch: str
    upstream: str
    branch: str
    start: str
    commit: str
    title: str
    body_file: str
    push: list[str] = field(default_factory=list)
    gh: list[str] = field(default_factory=list)
    pushed: bool = False
    url: str = ""
    notes: list[str] = field(default_factory=list)
    failed: str = ""  # set when a step after the push failed: what was done, what is left


def github_repo(url: str) -> str:
    """`https://github.com/NVIDIA/Megatron-LM.git` -> `NVIDIA/Megatron-LM` ('' if not GitHub)."""
    match = _GITHUB_RE.search(url)
    return f"{match.group(1)}/{match.group(2)}" if match else ""


def test_source(root: Path, node: str) -> str:
    """The source of test `path::name` (or `path::Class::name`) in this repository, else "".

    Inlined in the PR body so reviewers see the test itself, not a path into this repository.
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


def pr_body(message_body: str, patch: Patch, root: Path) -> str:
    """The PR description as an upstream contribution: the commit message without this
    repository's trailers, and the tripwire test inlined (never a path of ours)."""
    lines = message_body.rstrip("\n").split("\n")
    kept = [x for x in lines if not x.lower().startswith(tuple(k + ":" for k in INTERNAL_TRAILERS))]
    while kept and not kept[-1].strip():
        kept.pop()
    tests = patch.trailer_values("Test")
    out = ["\n".join(kept), ""]
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


def _start_point(repo: Path, remote: str, base: str) -> str:
    for name in (f"refs/remotes/{remote}/{base}", f"refs/remotes/origin/{base}", base):
        sha = rev(repo, f"{name}^{{commit}}")
        if sha:
            return sha
    raise PatchToolError(
        f"{repo}: no {remote}/{base} or {base} to branch from; fetch it "
        f"(git -C {repo} fetch {remote} {base}) or pass --base <branch or commit>"
    )


def build_branch(repo: Path, start: str, branch: str, patch_file: Path, force: bool) -> str:
    """`git am` the patch on `start` in a temporary worktree; point `branch` at the result."""
    ref = f"refs/heads/{branch}"
    existing = rev(repo, ref)
    if existing and not force:
        raise PatchToolError(
            f"{repo}: branch {branch} exists ({existing[:12]}); pass --force to rebuild it "
            f"or --branch <other name>"
        )
    # The person running this commits; without a configured identity, the patch author does.
    committer: dict[str, str] = {}
    if not git_ok(["var", "GIT_COMMITTER_IDENT"], repo):
        author = parse_patch(patch_file)
        committer = {
            "GIT_COMMITTER_NAME": author.author_name,
            "GIT_COMMITTER_EMAIL": author.author_email,
        }
    with tempfile.TemporaryDirectory(prefix="open-pr-") as tmp:
        worktree = Path(tmp) / "wt"
        git(["worktree", "add", "-q", "--detach", str(worktree), start], repo)
        try:
            args = ["-c", "core.hooksPath=/dev/null", "am", "-k", "--quiet", "--no-3way"]
            git([*args, str(patch_file)], worktree, env=committer)
            head = git_text(["rev-parse", "HEAD"], worktree)
        except GitError as exc:
            raise PatchToolError(
                f"{patch_file.name} does not apply to {start[:12]} ({exc.stderr.strip()[:200]}); "
                "rebase the series onto it first (tools/patches rebase ... --to <ref>) or pass "
                "--base <ref it applies to>"
            ) from exc
        finally:
            git(["worktree", "remove", "--force", str(worktree)], repo, check=False)
            git(["worktree", "prune"], repo, check=False)
    git(["update-ref", "-m", "tools/patches open-pr", ref, head], repo)
    return head


def open_pr(
    root: Path,
    given: str,
    *,
    remote: str = "origin",
    base: str = "main",
    branch: str = "",
    push: bool = False,
    force: bool = False,
    gh: str | None = None,
) -> PullRequest:
    loc = locate_patch(root, given)
    up: Upstream = loc.upstream
    repo = checkout_dir(root, up)
    standin = is_repo(repo) and bool(standin_spec(repo))
    if not is_real_clone(repo):
        raise PatchToolError(
            f"{up.path}: open-pr needs a git clone of {up.url} (this is "
            f"{'a release stand-in' if standin else 'no checkout'}); run git submodule update --init {up.path}"
        )
    patch = parse_patch(loc.path)
    if patch.problems:
        line, why = patch.problems[0]
        raise PatchToolError(f"{loc.path}:{line}: {why}; fix the patch first (tools/patches lint)")
    branch = branch or BRANCH_PREFIX + loc.path.stem
    start = _start_point(repo, remote, base)
    head = build_branch(repo, start, branch, loc.path, force)
    title = git_text(["log", "-1", "--format=%s", head], repo)
    message_body = git_text(["log", "-1", "--format=%b", head], repo)
    patch_rel = loc.path.relative_to(root.resolve()).as_posix()
    body_dir = root / PR_DIR
    body_dir.mkdir(parents=True, exist_ok=True)
    body_file = body_dir / f"{up.name}-{loc.path.stem}.md"
    body_file.write_text(pr_body(message_body, patch, root), encoding="utf-8")
    remote_url = git_text(["remote", "get-url", remote], repo, check=False)
    push_cmd = ["git", "-C", str(repo), "push", remote, f"{head}:refs/heads/{branch}"]
    fork = github_repo(remote_url)
    head_arg = f"{fork.split('/')[0]}:{branch}" if fork and fork != github_repo(up.url) else branch
    gh_cmd = ["gh", "pr", "create", "--base", base, "--head", head_arg, "--title", title]
    gh_cmd += ["--body-file", str(body_file)]
    if github_repo(up.url):
        gh_cmd[3:3] = ["--repo", github_repo(up.url)]
    pr = PullRequest(
        patch_rel, up.name, branch, start, head, title, str(body_file), push_cmd, gh_cmd
    )
    if not push:
        pr.notes.append("nothing pushed (pass --push to run the commands above)")
        return pr
    return _push_and_create(root, pr, repo, up, remote, remote_url, gh)


def _push_and_create(
    root: Path,
    pr: PullRequest,
    repo: Path,
    up: Upstream,
    remote: str,
    remote_url: str,
    gh: str | None,
) -> PullRequest:
    """Push the branch, then `gh pr create` and record the PR URL in the patch (--push)."""
    patch_rel, branch, head, push_cmd, gh_cmd = pr.patch, pr.branch, pr.commit, pr.push, pr.gh
    if not remote_url:
        raise PatchToolError(
            f"{up.path}: no remote {remote!r}; add your fork: git -C {up.path} remote add {remote} <url>"
        )
    proc = run(push_cmd[3:], repo)
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()
        raise PatchToolError(
            f"git push to {remote} failed: {tail[-1] if tail else proc.returncode}"
        )
    pr.pushed = True
    gh_path = gh if gh is not None else shutil.which("gh")
    if not gh_path:
        pr.notes.append(
            "gh not found: open the PR with the gh command above (or the web UI), then run "
            f"tools/patches set-status {patch_rel} submitted <PR URL>"
        )
        return pr
    proc = subprocess.run([gh_path, *gh_cmd[1:]], cwd=repo, capture_output=True, check=False)
    out = proc.stdout.decode(errors="replace").strip()
    urls = re.findall(r"https?://\S+", out)
    if proc.returncode != 0 or not urls:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()
        why = tail[-1] if tail else f"exit {proc.returncode}, no URL printed"
        pr.failed = (
            f"gh pr create failed ({why}). Done: pushed {branch} to {remote} "
            f"({head[:12]}). left to do: {shlex.join(gh_cmd)}; then tools/patches set-status "
            f"{patch_rel} submitted <PR URL>"
        )
        return pr
    pr.url = urls[-1]
    set_status(root, patch_rel, "submitted", pr.url)
    pr.notes.append(f"recorded Upstream-Status: submitted {pr.url} in {patch_rel}")
    return pr
