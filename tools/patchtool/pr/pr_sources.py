"""What `open-pr` reads before it writes anything: the contributor's identity, the upstream's
own PR template, issue templates and title convention, and the patches a patch `Depends-On`.

Why from the PR's base commit (`git ls-tree`/`git show`), not the work tree: the PR is judged by
the files of the branch it targets, and the checkout's HEAD is branch `patched`, which may
differ; reading objects also leaves the checkout untouched.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path, PurePosixPath

from ..errors import PatchToolError
from ..git.git import git, git_text, rev
from ..model.manifest import Manifest, Upstream
from ..model.series import Patch, parse_depends, parse_patch, read_series
from .issue_template import ISSUE_TEMPLATE_DIR, IssueTemplate, is_template_file, parse_template
from .pr_template import (
    DEPENDS_KEY,
    TEMPLATE_DIRS,
    Dependency,
    Identity,
    pick_template,
)
from .pr_title import CONVENTION_DOCS, TitleConvention, title_convention

BRANCH_PREFIX = "mcore-rl-stack/"
_GITHUB_RE = re.compile(r"github\.com[:/]([^/]+)/([^/]+?)(?:\.git)?/?$")


def github_repo(url: str) -> str:
    """`https://github.com/NVIDIA/Megatron-LM.git` -> `NVIDIA/Megatron-LM` ('' if not GitHub)."""
    match = _GITHUB_RE.search(url)
    return f"{match.group(1)}/{match.group(2)}" if match else ""


def pr_branch(patch_name: str) -> str:
    """The PR branch open-pr makes for `<name>.patch` (a stacked PR's base is found by it)."""
    return BRANCH_PREFIX + PurePosixPath(patch_name).stem


def contributor(repo: Path, up: Upstream) -> Identity:
    """git's user.name / user.email as resolved in the upstream checkout; refuse when unset."""
    name = git_text(["config", "user.name"], repo, check=False)
    email = git_text(["config", "user.email"], repo, check=False)
    missing = [key for key, value in (("user.name", name), ("user.email", email)) if not value]
    if missing:
        raise PatchToolError(
            f"{up.path}: git {' and '.join(missing)} not set; the upstream commit is authored and "
            'signed off (DCO) by you: git config --global user.name "Your Name" && '
            "git config --global user.email you@example.com"
        )
    return Identity(name, email)


def _tree_paths(repo: Path, commit: str, folder: str, recursive: bool = False) -> list[str]:
    """The files (blobs) in `folder` ("" = the root) of `commit`'s tree."""
    args = ["ls-tree", "-z", *(["-r"] if recursive else []), commit]
    args += ["--", f"{folder}/"] if folder else []
    entries = (e.split("\t", 1) for e in git(args, repo, check=False).split("\0") if "\t" in e)
    return [path for meta, path in entries if meta.split()[1] == "blob"]


def _blob_text(repo: Path, commit: str, path: str) -> str:
    return git(["show", f"{commit}:{path}"], repo, check=False)


def read_template(repo: Path, commit: str) -> tuple[str, str]:
    """(path, text) of the upstream's PR template at `commit`; ("", "") when it has none."""
    paths: list[str] = []
    for folder in TEMPLATE_DIRS:
        paths += _tree_paths(repo, commit, folder, recursive=folder == ".github")
    found = pick_template(paths)
    return (found, _blob_text(repo, commit, found)) if found else ("", "")


def read_issue_templates(repo: Path, commit: str) -> list[IssueTemplate]:
    """The upstream's issue templates (.github/ISSUE_TEMPLATE/) at `commit`, parsed."""
    paths = [p for p in _tree_paths(repo, commit, ISSUE_TEMPLATE_DIR) if is_template_file(p)]
    return [parse_template(p, _blob_text(repo, commit, p)) for p in paths]


def read_convention(repo: Path, commit: str) -> TitleConvention:
    """The upstream's title convention, from its CONTRIBUTING texts and workflows at `commit`."""
    present = set(_tree_paths(repo, commit, "")) | set(_tree_paths(repo, commit, ".github"))
    present |= set(_tree_paths(repo, commit, "docs/developer"))
    docs = {p: _blob_text(repo, commit, p) for p in CONVENTION_DOCS if p in present}
    workflows = [PurePosixPath(p).name for p in _tree_paths(repo, commit, ".github/workflows")]
    return title_convention(docs, workflows)


def load_dependencies(
    root: Path, patch: Patch, up: Upstream, manifest: Manifest
) -> list[Dependency]:
    """The patches `patch` names in `Depends-On:`, with their subject and Upstream-Status."""
    out = []
    for value in patch.trailer_values(DEPENDS_KEY):
        parsed = parse_depends(value)
        if parsed is None or parsed[0] not in manifest.upstreams:
            raise PatchToolError(
                f"{patch.path.name}: {DEPENDS_KEY}: {value!r}: want <Upstream>/<patch file> "
                f"with Upstream one of {', '.join(manifest.upstreams)} (tools/patches lint)"
            )
        name, file = parsed
        path = root / "patches" / name / file
        if not path.is_file():
            raise PatchToolError(
                f"{patch.path.name}: {DEPENDS_KEY}: patches/{name}/{file} does not exist; "
                "fix the trailer (tools/patches lint)"
            )
        dep = parse_patch(path)
        status = (dep.trailer_values("Upstream-Status") or ["pending"])[0]
        repo = github_repo(manifest.upstreams[name].url)
        out.append(Dependency(name, file, dep.subject, repo, status, name == up.name))
    return out


def stack_base(
    root: Path, repo: Path, up: Upstream, patch: Patch, deps: list[Dependency]
) -> Dependency:
    """The same-upstream dependency a `--stack` PR goes on (the latest in the series), with its
    PR branch, which an earlier `open-pr` made here; refuse when there is none."""
    same = [d for d in deps if d.same_upstream]
    if not same:
        raise PatchToolError(
            f"--stack: {patch.path.name} has no {DEPENDS_KEY}: on another {up.name} patch; "
            "open it without --stack"
        )
    order = [e.name for e in read_series(root / up.series_dir / "series")]
    dep = max(same, key=lambda d: order.index(d.patch) if d.patch in order else -1)
    branch = pr_branch(dep.patch)
    if not rev(repo, f"refs/heads/{branch}"):
        raise PatchToolError(
            f"--stack: {up.path} has no branch {branch} (the PR branch of {dep.patch}); open that "
            f"PR first: tools/patches open-pr patches/{up.name}/{dep.patch}"
        )
    return replace(dep, stacked_branch=branch)
