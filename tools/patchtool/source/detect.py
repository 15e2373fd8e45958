"""Where an upstream's source comes from: submodule clone, local mirror, release stand-in, or
missing; and materialising the stand-in from a PyPI release archive when no clone is reachable.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ..errors import GitError, PatchToolError
from ..git.git import git, git_text, git_timeout, rev
from ..model.manifest import Upstream
from .checkout import (
    PIN_REF,
    checkout_dir,
    cloned_from,
    has_commit,
    is_repo,
    record_clone_failed,
    record_cloned_from,
    standin_spec,
)
from .mirror import mirror_repo
from .partial import absent_note, checkout_partial
from .standin import Downloader, materialise_standin, pip_download, spec_of


class Kind(StrEnum):
    """Where a checkout's source comes from (`source` in `status --json`).

    SUBMODULE: a clone of the manifest URL holding the pin. MIRROR: a clone holding the pin whose
    origin is another URL (a local mirror via `url.<mirror>.insteadOf`). STANDIN: a release
    stand-in (the PyPI archive as one commit; NOT a clone), maybe a proxy for a non-release pin.
    MISSING: no usable checkout (absent, or the pin commit is not in it).
    """

    SUBMODULE = "submodule"
    MIRROR = "mirror"
    STANDIN = "standin"
    MISSING = "missing"


SUBMODULE, MIRROR, STANDIN, MISSING = Kind.SUBMODULE, Kind.MIRROR, Kind.STANDIN, Kind.MISSING
PROBE_TIMEOUT_S = 30.0
CLONE_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Source:
    """The source of one checkout: kind, the commit patches go on, and a human detail."""

    kind: Kind
    pin: str
    detail: str
    spec: str = ""  # stand-ins: the release it holds, `package==version`
    proxy: bool = False  # a stand-in for a non-release pin: the nearest release, not the pin


def detect_source(root: Path, up: Upstream) -> Source:
    """Classify the checkout without changing it."""
    repo = checkout_dir(root, up)
    if not is_repo(repo):
        return Source(MISSING, "", f"{up.path} is not a git checkout")
    standin = standin_spec(repo)
    if standin:
        pin = rev(repo, PIN_REF)
        if up.standin and up.standin.proxy and standin == spec_of(up.standin):
            detail = (
                f"PROXY release stand-in {standin} for {up.commit[:12]} (nearest release, "
                f"NOT the pinned commit), NOT a clone of {up.url}"
            )
            return Source(STANDIN, pin, detail, standin, True)
        return Source(STANDIN, pin, f"release stand-in {standin}, NOT a clone of {up.url}", standin)
    if not has_commit(repo, up.commit):
        return Source(MISSING, "", f"{up.path} has no commit {up.commit[:12]} (fetch it)")
    fetch_url = git_text(["ls-remote", "--get-url", "origin"], repo, check=False)
    note = absent_note(repo)
    note = f" ({note})" if note else ""
    if fetch_url and fetch_url != up.url:
        return Source(MIRROR, up.commit, f"clone via local mirror {fetch_url}{note}")
    mirror = cloned_from(repo)
    if mirror and mirror != up.url:
        return Source(MIRROR, up.commit, f"clone of the pin from mirror {mirror}{note}")
    return Source(SUBMODULE, up.commit, f"submodule clone of {up.url}")


def _run_git_timeout(args: list[str], cwd: Path, timeout: float) -> tuple[bool, str]:
    """(ok, why not) of a network git call with a time limit."""
    code, detail = git_timeout(args, cwd, timeout)
    if code is None:
        return False, f"timed out after {timeout:.0f} s"
    return code == 0, detail


def probe_url(url: str, cwd: Path) -> str:
    """'' if `url` (or its insteadOf mirror) answers `git ls-remote` within the probe time,
    else why not."""
    ok, why = _run_git_timeout(["ls-remote", url, "HEAD"], cwd, PROBE_TIMEOUT_S)
    return "" if ok else f"{url} unreachable ({why})"


def effective_url(root: Path, url: str) -> str:
    """`url` after git's `url.<base>.insteadOf` rewrites (a mirror), without any network."""
    return git_text(["ls-remote", "--get-url", url], root, check=False) or url


def url_answers(root: Path, up: Upstream) -> tuple[bool, str]:
    """(True, "") if the submodule URL (or its insteadOf mirror) answers within the probe time."""
    why = probe_url(up.url, root)
    return not why, why


def _module_gitdir(root: Path, up: Upstream) -> Path:
    """Where `git submodule update` keeps this submodule's repository (`modules/<name>` of this
    work tree's git dir, which in a linked worktree is not the common one)."""
    listed = git(
        ["config", "--null", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.path$"],
        root,
        check=False,
    )
    name = up.path
    for entry in str(listed).split("\0"):
        key, _, value = entry.partition("\n")
        if value == up.path:
            name = key[len("submodule.") : -len(".path")]
    where = ["rev-parse", "--path-format=absolute", "--git-path", f"modules/{name}"]
    return Path(git_text(where, root))


def _discard_failed_clone(repo: Path, gitdir: Path, gitdir_existed: bool) -> None:
    """Undo what a failed `submodule update` left behind in a checkout that was empty before.

    A clone that fails at checkout (e.g. a mirror missing some blobs) leaves a half-written work
    tree; removing it lets the release stand-in take its place. Nothing existed there before,
    so nothing is lost.
    """
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    if not gitdir_existed and gitdir.exists():
        shutil.rmtree(gitdir)


def try_submodule(root: Path, up: Upstream) -> tuple[bool, str, bool]:
    """`git submodule update --init` if the URL (or its insteadOf mirror) answers fast:
    (cloned, why not, whether the URL answered).

    A failed attempt on a path that was empty is rolled back, so the stand-in can take its place.
    """
    ok, why = url_answers(root, up)
    if not ok:
        return False, why, False
    repo = checkout_dir(root, up)
    fresh = not repo.exists() or not any(repo.iterdir())
    gitdir = _module_gitdir(root, up)
    gitdir_existed = gitdir.exists()
    args = ["submodule", "update", "--init", "--checkout", "--", up.path]
    ok, why = _run_git_timeout(args, root, CLONE_TIMEOUT_S)
    if ok:
        via = effective_url(root, up.url)
        if via != up.url:
            record_cloned_from(repo, via)
        return True, "", True
    if fresh:
        _discard_failed_clone(repo, gitdir, gitdir_existed)
    return False, f"git submodule update failed ({why})", True


def _from_partial_mirror(root: Path, up: Upstream) -> Source | None:
    """The exact pin out of this run's mirror when a transfer from it failed (partial.py)."""
    bare = mirror_repo(up.name)
    repo = checkout_dir(root, up)
    if bare is None or not has_commit(bare, up.commit):
        return None
    if repo.exists() and any(repo.iterdir()):
        return None
    checkout_partial(root, up, bare)
    source = detect_source(root, up)
    return source if source.kind != MISSING else None


def ensure_source(
    root: Path,
    up: Upstream,
    downloader: Downloader = pip_download,
    *,
    detected: Source | None = None,
) -> Source:
    """Make sure the checkout exists: submodule first, then the stand-in; else MISSING.

    `detected` is the caller's `detect_source` result for the same checkout, if it has one.
    """
    source = detected or detect_source(root, up)
    if source.kind == STANDIN:
        want = spec_of(up.standin) if up.standin else ""
        if want and source.spec == want and source.pin:
            return source
        raise PatchToolError(
            f"{up.path}: stand-in does not match the manifest ({source.detail}; manifest wants "
            f"{want or 'a clone'}); remove {up.path} (rm -rf) and re-run tools/patches apply"
        )
    if source.kind != MISSING:
        return source
    ok, why, answered = try_submodule(root, up)
    if ok:
        source = detect_source(root, up)
        if source.kind != MISSING:
            return source
        why = source.detail
    partial = _from_partial_mirror(root, up)
    if partial is not None:
        return partial
    if up.standin is None:
        fix = (
            "provide the submodule, e.g. from a local clone: git config --global "
            f"url.<path-to-clone>.insteadOf {up.url} && git submodule update --init {up.path}"
        )
        return Source(MISSING, "", f"{why}; no release stand-in exists. Fix: {fix}")
    repo = checkout_dir(root, up)
    if repo.exists() and any(repo.iterdir()):
        raise PatchToolError(
            f"{up.path}: {why}; the release stand-in needs an empty {up.path}, which holds other "
            "files: fix the checkout, or move it away and re-run"
        )
    try:
        materialise_standin(root, up, downloader)
    except GitError as exc:
        raise PatchToolError(f"{up.path}: could not build the stand-in: {exc}") from exc
    if answered:
        record_clone_failed(repo, effective_url(root, up.url), up.commit)
    return detect_source(root, up)
