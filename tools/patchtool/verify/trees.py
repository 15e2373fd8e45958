"""The scratch trees a verify state runs on: the series tree (the checkout's HEAD, read with
`git archive`, never changed) and, per patch, the series tree with that patch left out.

Why its own module: `rebase --tripwires` builds the same trees (`full_tree`) and both name
them to the tests the same way (`PATCHTOOL_TREE_<UPSTREAM>`, `tree_env`).
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

from ..errors import GitError, PatchToolError
from ..git.git import git, git_bytes
from ..model.series import Patch
from ..source.partial import recorded_absent_paths
from .pytest_run import run_killable


def series_tree(repo: Path, dest: Path) -> Path:
    """The checkout's HEAD (the patched series) as a plain scratch tree; the checkout is only
    read (`git archive`), never changed."""
    dest.mkdir(parents=True)
    # A checkout from a partial mirror lacks a few blobs (partial.py): the tree without them.
    excluded = [f":(exclude){path}" for path in recorded_absent_paths(repo)]
    archive = git_bytes(["archive", "--format=tar", "HEAD", "--", ".", *excluded], repo)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def compile_tree(python: Path, tree: Path) -> Path:
    """Byte-compile `tree` once with the states' interpreter, before any state runs on it.

    Why: every left-out state's tree hard-links this one, bytecode included, so the ~80 states
    import megatron-core and Bridge from bytecode instead of compiling them again each. The
    bytecode is checked against its source's hash, so a file a state changed (a reverse-applied
    patch's private copy) is compiled afresh, never run from the series' bytecode. A file that
    does not compile is left for the state to fail on, as it would without this.
    """
    run_killable(
        [str(python), "-m", "compileall", "-qq", "--invalidation-mode", "checked-hash", str(tree)]
    )
    return tree


def _link(src: str, dst: str) -> None:
    """Hard-link one file; bytecode that vanished while the tree was read (another state's
    interpreter renaming its temporary file into place) is skipped, the state compiles it."""
    try:
        os.link(src, dst)
    except FileNotFoundError:
        if "__pycache__" not in Path(src).parts:
            raise


def reversed_tree(
    series: Path, patches: list[Patch], dest: Path, exclude: tuple[str, ...] = ()
) -> Path:
    """`series` with `patches` (in series order) reverse-applied last to first, in `dest`:
    every file hard-linked from `series` except the patches' own files, which are private
    copies (the shared tree stays intact).

    One patch: the tripwire's left-out state. The tail of the series after a patch: the tree
    of the series up to it (the regression gate's "before" tree and its attribution steps).
    """
    # With the series' bytecode (compile_tree): a module whose source this tree changes fails
    # the bytecode's source check (hash, or mtime and size) and is compiled again.
    shutil.copytree(series, dest, symlinks=True, copy_function=_link)
    touched = {f.path for p in patches for f in p.files}
    touched |= {f.old_path for p in patches for f in p.files if f.old_path}
    for rel in sorted(touched):
        target = dest / rel
        if target.is_file() and not target.is_symlink():
            data = target.read_bytes()
            target.unlink()
            target.write_bytes(data)
    env = {"GIT_CEILING_DIRECTORIES": str(dest.parent)}  # a plain tree, not a repository
    args = ["apply", "-R", *(f"--exclude={pattern}" for pattern in exclude)]
    for patch in reversed(patches):
        data = patch.path.read_bytes()
        try:
            git([*args, "--check", "-"], dest, input=data, env=env)
        except GitError as exc:
            raise PatchToolError(
                f"{patch.path.name} does not reverse-apply on the patched tree (a later patch "
                "in the series touches the same lines): it cannot be left out alone; add "
                f"`Depends-On: <Upstream>/{patch.path.name}` to the later patch (its proofs then "
                "leave out both), merge the two, or make the later one independent"
            ) from exc
        git([*args, "-"], dest, input=data, env=env)
    return dest


TREE_VAR_PREFIX = "PATCHTOOL_TREE_"


def tree_env_var(upstream: str) -> str:
    """The variable naming the tree a tripwire should read instead of 3rdparty/<upstream>."""
    return TREE_VAR_PREFIX + upstream.upper().replace("-", "_")


def tree_env(upstream: str, tree: Path) -> dict[str, str]:
    """Environment that points a patch's tests at `tree` instead of 3rdparty/<upstream>.

    Imports follow PYTHONPATH (the tree root, and `src/` for src-layout upstreams, ahead of the
    editable install); tests that read upstream files by path honour `PATCHTOOL_TREE_<NAME>`
    (tests/support/upstream_tree.py).
    """
    paths = [str(tree), str(tree / "src"), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in paths if p), tree_env_var(upstream): str(tree)}


def full_tree(scratch: Path, dest: Path) -> Path:
    """Scratch HEAD's whole tree in `dest` (the scratch work tree is sparse).

    Blobs absent from a partial mirror (large files) are left out; the sparse work tree's own
    files are laid over the top, since they are what the rebase is looking at.
    """
    listing = git(["ls-tree", "-r", "-z", "--format=%(objectname) %(path)", "HEAD"], scratch)
    entries = [e.split(" ", 1) for e in str(listing).split("\0") if e]
    check = git(
        ["cat-file", "--batch-check=%(objectname) %(objecttype)"],
        scratch,
        input="".join(f"{sha}\n" for sha, _ in entries),
    )
    present = {line.split(" ")[0] for line in str(check).splitlines() if line.endswith(" blob")}
    paths = [path for sha, path in entries if sha in present]
    archive = git_bytes(["archive", "--format=tar", "HEAD", "--", *paths], scratch)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    for rel in str(git(["ls-files", "-z"], scratch)).split("\0"):
        if rel and (scratch / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(scratch / rel, dest / rel)
    return dest
