"""The exact pin from a mirror that lacks a few blobs, checked out without a transfer.

Why: the only Megatron-Bridge snapshot on these machines lacks two documentation GIFs, and git's
transport refuses to send an incomplete tree, so `clone`/`submodule update` from it fail and
apply fell back to a release proxy. Every other object of the pin is there, so the checkout
gets the mirror's objects copied in (no alternate: the checkout must outlive the mirror), its
`shallow` file, and a checkout of every file but exactly the paths whose blobs are absent
(found by asking the object store, not by name), marked skip-worktree. HEAD is then the exact
pin and the sources are the real ones; `status` says which paths are absent.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import git, git_text
from ..model.manifest import Upstream
from .checkout import checkout_dir, record_cloned_from

ABSENT_KEY = "patchtool.absentPaths"  # the paths left out, one line of the checkout's config


def absent_paths(bare: Path, commit: str) -> list[str]:
    """Paths of `commit`'s tree whose blob is not in `bare` (sorted)."""
    listing = git(["ls-tree", "-r", "-z", "--full-tree", commit], bare)
    blobs: dict[str, list[str]] = {}
    for entry in listing.split("\0"):
        meta, _, path = entry.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and parts[1] == "blob":
            blobs.setdefault(parts[2], []).append(path)
    if not blobs:
        return []
    check = git(
        ["cat-file", "--batch-check=%(objectname) %(objecttype)"], bare, input="\n".join(blobs)
    )
    missing = [line.split()[0] for line in check.splitlines() if line.endswith(" missing")]
    return sorted(path for sha in missing for path in blobs[sha])


def recorded_absent_paths(repo: Path) -> list[str]:
    """The paths `checkout_partial` left out of `repo` (none for any other checkout)."""
    return git_text(["config", "--get", ABSENT_KEY], repo, check=False).split()


def absent_note(repo: Path) -> str:
    """`partial: N paths absent: a, b, ...` for a checkout made here, else ""."""
    paths = recorded_absent_paths(repo)
    if not paths:
        return ""
    shown = ", ".join(paths[:3]) + (f", ... ({len(paths) - 3} more)" if len(paths) > 3 else "")
    return f"partial: {len(paths)} paths absent (blobs not in the mirror): {shown}"


def checkout_partial(root: Path, up: Upstream, bare: Path) -> list[str]:
    """Check `up`'s pin out of `bare` into its (empty) checkout path; the paths left out.

    Raises PatchToolError, with the checkout path emptied again, when it cannot be done.
    """
    repo = checkout_dir(root, up)
    absent = absent_paths(bare, up.commit)
    try:
        git(["init", "-q", str(repo)], root)
        objects = Path(git_text(["rev-parse", "--git-path", "objects"], bare))
        objects = objects if objects.is_absolute() else bare / objects
        target = repo / ".git" / "objects"
        shutil.copytree(
            objects, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("alternates")
        )
        if (bare / "shallow").is_file():
            shutil.copy(bare / "shallow", repo / ".git" / "shallow")
        git(["update-ref", "refs/heads/pin", up.commit], repo)
        # A sparse checkout for the checkout itself only: `git checkout` then marks the absent
        # paths skip-worktree, and `read-tree` + `reapply` leave a primed cache-tree (`git am`
        # then reuses the trees of untouched directories instead of needing every blob).
        # Written by hand, not `git sparse-checkout set`: that puts core.sparseCheckout in
        # config.worktree. Switched off at the end, keeping the bits: left on, sparse checkout
        # would own every skip-worktree bit and clear those nested wiring sets on its links.
        sparse = repo / ".git" / "info" / "sparse-checkout"
        sparse.parent.mkdir(parents=True, exist_ok=True)
        sparse.write_text("/*\n" + "".join(f"!/{path}\n" for path in absent))
        git(["config", "core.sparseCheckout", "true"], repo)
        git(["checkout", "-q", "pin"], repo)
        git(["read-tree", up.commit], repo)
        git(["sparse-checkout", "reapply"], repo)
        git(["config", "--unset", "core.sparseCheckout"], repo)
        sparse.unlink()
        git(["remote", "add", "origin", str(bare)], repo)
        record_cloned_from(repo, str(bare))
        if absent:
            git(["config", ABSENT_KEY, " ".join(absent)], repo)
    except (PatchToolError, OSError) as exc:
        shutil.rmtree(repo, ignore_errors=True)
        repo.mkdir(parents=True, exist_ok=True)
        raise PatchToolError(
            f"{up.path}: could not check {up.commit[:12]} out of the partial mirror {bare}: {exc}"
        ) from exc
    return absent
