"""What `apply` and `reset` check before they touch a checkout: nothing of the user's is lost.

Uncommitted changes are refused (or stashed with --force), a branch `patched` holding commits
apply did not make is refused (or kept under another name), a git am/rebase in progress is
left to its owner, unsafe patch paths and (on a stand-in) foreign pre-images are refused.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import PatchToolError
from ..git.git import branch_commits, export_commits, git, git_text, rev
from ..model.manifest import Upstream
from ..model.paths import patch_path_problems
from ..model.series import Series
from ..source.checkout import APPLIED_REF, BRANCH, BRANCH_REF, dirty_files


def refuse_or_stash(repo: Path, up: Upstream, force: bool, command: str) -> str:
    """Refuse on uncommitted changes listing them; with --force stash them and return the ref."""
    dirty = dirty_files(repo)
    if not dirty:
        return ""
    if not force:
        listed = ", ".join(line[3:] for line in dirty[:20]) + (" ..." if len(dirty) > 20 else "")
        raise PatchToolError(
            f"{up.name}: {up.path} has uncommitted changes ({listed}); commit or stash them, "
            f"or re-run `tools/patches {command} --force {up.name}` to stash them (nothing is deleted)"
        )
    message = f"tools/patches {command} --force: saved before {command}"
    git(["stash", "push", "--include-untracked", "-m", message], repo)
    return rev(repo, "refs/stash")


def _exports_to(repo: Path, pin: str, tip: str, series: Series) -> bool:
    """True if pin..tip, exported, is byte for byte the series files (nothing else to keep)."""
    if git_text(["merge-base", pin, tip], repo, check=False) != pin:
        return False  # not built on the pin (e.g. rebased elsewhere): that is work to keep
    try:
        commits = branch_commits(repo, pin, tip)
    except PatchToolError:  # merge commits: not a series
        return False
    return len(commits) == len(series) and export_commits(repo, commits) == [
        patch.path.read_bytes() for _, patch in series
    ]


def guard_branch(repo: Path, up: Upstream, pin: str, force: bool, series: Series) -> str:
    """Refuse to move branch `patched` if it holds commits apply did not make; --force keeps them.

    A branch that exports to exactly the series (edited, then `tools/patches export`ed) holds
    nothing the series lacks, so it is moved without asking.
    """
    current = rev(repo, BRANCH_REF)
    if not current or current in (rev(repo, APPLIED_REF), pin):
        return ""
    if _exports_to(repo, pin, current, series):
        return ""
    keep = f"{BRANCH}-before-{current[:12]}"
    if not force:
        raise PatchToolError(
            f"{up.name}: branch {BRANCH} ({current[:12]}) has commits tools/patches did not make; "
            f"keep them (git -C {up.path} branch my-work {BRANCH}) or re-run with --force, "
            f"which saves them as branch {keep}"
        )
    git(["update-ref", f"refs/heads/{keep}", current], repo)
    return keep


def check_safe_paths(up: Upstream, series: Series, checkout: Path | None) -> None:
    for _, patch in series:
        problems = [*patch.problems, *patch_path_problems(patch, checkout)]
        if problems:
            line, why = problems[0]
            raise PatchToolError(
                f"{up.series_dir / patch.path.name}:{line}: {why}; refusing to apply"
            )


def check_preimages(repo: Path, pin: str, up: Upstream, series: Series) -> None:
    """On a stand-in, every pre-image blob must be the stand-in's file (else it is no proxy)."""
    paths = sorted({d.old_path for _, p in series for d in p.files if d.old_path})
    blobs: dict[str, str | None] = dict.fromkeys(paths)
    if paths:
        out = git_text(["ls-tree", "-r", "--full-tree", pin, "--", *paths], repo)
        for row in out.splitlines():
            meta, path = row.split("\t", 1)
            blobs[path] = meta.split()[2]
    for entry, patch in series:
        for diff in patch.files:
            if diff.is_new or not diff.old_path:
                if diff.new_path:
                    blobs[diff.new_path] = diff.new_blob
                continue
            have = blobs.get(diff.old_path)
            where = f"{up.series_dir / entry.name}:{diff.line}"
            if have is None:
                raise PatchToolError(
                    f"{where}: {diff.old_path} is not in the stand-in ({up.standin.package if up.standin else ''} "
                    "release archive); this patch cannot be verified on a stand-in: provide the clone"
                )
            if diff.old_blob and not have.startswith(diff.old_blob):
                raise PatchToolError(
                    f"{where}: {diff.old_path} in the stand-in is blob {have[:12]}, the patch "
                    f"expects {diff.old_blob[:12]}: the release archive differs from the pinned "
                    "commit there; refusing (use a clone of the pin, or rebase the series)"
                )
            if diff.old_path != diff.new_path:
                blobs[diff.old_path] = None
            if diff.new_path:
                blobs[diff.new_path] = diff.new_blob or have


def refuse_in_progress(repo: Path, up: Upstream) -> None:
    """A `git am` or rebase someone left in the checkout is their work: never abort it for them."""
    names = ("rebase-apply", "rebase-merge")
    args = [arg for name in names for arg in ("--git-path", name)]
    paths = git_text(["rev-parse", *args], repo).splitlines()
    for name, path in zip(names, paths, strict=True):
        state = Path(path)
        if (state if state.is_absolute() else repo / state).exists():
            raise PatchToolError(
                f"{up.path}: a git am/rebase is in progress ({name}); finish it or abort it "
                f"(`git -C {up.path} am --abort` / `rebase --abort`), then re-run apply"
            )
