"""The state patchtool keeps in each upstream checkout, in one place.

- branch `patched` (`BRANCH_REF`): the applied series; HEAD is a symbolic ref to it after apply.
- `PIN_REF`: the commit patches go on (the manifest commit, or the stand-in commit).
- `APPLIED_REF` + config `DIGEST_KEY` (`series_digest`): what apply last made; a re-run is a
  no-op when digest, HEAD, branch and a clean tree match.
- config `STANDIN_KEY = <package>==<version>`: the checkout is a release stand-in, not a clone.
- config `CLONE_FAILED_KEY = <url> <commit>`: a stand-in laid out because that URL (after
  insteadOf) answered but could not give that commit; apply does not retry it on every run.
- config `CLONED_FROM_KEY = <url>`: apply cloned the checkout from this mirror (`--mirror-dir`),
  so `status` names it as the source even in a later run without the mirror.
- config `WIRED_KEY = <nested path>` (one value per link): apply linked this nested path of the
  checkout to one of our checkouts (source/nested_wiring.py); reset removes exactly these.
- config `WIRED_FETCH_KEY = <previous fetch.recurseSubmodules or "<unset>">`: while a nested
  gitlink is linked, `fetch.recurseSubmodules=false` in the checkout (a fetch recursing into a
  linked submodule path fails); reset puts the previous value back.

Every command reads these names from here; none spells a ref or key out itself.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import git, git_ok, git_text, rev, run
from ..model.manifest import Upstream
from ..model.series import Series

BRANCH = "patched"
BRANCH_REF = f"refs/heads/{BRANCH}"
APPLIED_REF = "refs/patchtool/applied"
DIGEST_KEY = "patchtool.digest"
# The series' patch names the branch was applied from: export maps commits to names by position.
NAMES_KEY = "patchtool.appliedNames"
PIN_REF = "refs/patchtool/pin"
STANDIN_KEY = "patchtool.standin"
CLONE_FAILED_KEY = "patchtool.cloneFailed"
CLONED_FROM_KEY = "patchtool.clonedFrom"
WIRED_KEY = "patchtool.wired"
WIRED_FETCH_KEY = "patchtool.wiredFetchRecurse"


def series_digest(up: Upstream, series_dir: Path, series: Series) -> str:
    """Digest of everything an applied state depends on: pin, stand-in spec, series bytes."""
    h = hashlib.sha256(f"{up.commit}\n{up.standin}\n".encode())
    for entry, _ in series:
        h.update(entry.name.encode() + b"\0" + (series_dir / entry.name).read_bytes() + b"\0")
    return h.hexdigest()


def dirty_files(repo: Path) -> list[str]:
    """Uncommitted changes (tracked and untracked, not ignored) as `XY path` lines.

    The nested links apply made (`WIRED_KEY`) are not changes: git hides them (skip-worktree,
    an exclude line); should that be lost, git status fails on a link at a submodule path or
    lists it as untracked, and the status is taken again leaving those paths out by pathspec.
    A clean checkout costs one git call, as before the wiring.
    """
    args = ["status", "--porcelain=v1", "--untracked-files=normal"]
    proc = run(args, repo)
    out = proc.stdout.decode("utf-8", errors="surrogateescape")
    if proc.returncode == 0 and not out.strip():
        return []
    wired = git_text(["config", "--get-all", WIRED_KEY], repo, check=False).splitlines()
    if wired:
        spec = [f":(exclude,literal){path}" for path in wired if path]
        out = git([*args, "--", ".", *spec], repo)
    elif proc.returncode != 0:
        out = git(args, repo)  # raises with git's own message
    return [line for line in out.splitlines() if line.strip()]


def checkout_dir(root: Path, up: Upstream) -> Path:
    return root / up.path


def is_repo(path: Path) -> bool:
    """True if `path` itself is a git work tree (never the enclosing superproject)."""
    return (path / ".git").exists()


def has_commit(repo: Path, commit: str) -> bool:
    return git_ok(["cat-file", "-e", f"{commit}^{{commit}}"], repo)


def record_clone_failed(repo: Path, url: str, commit: str) -> None:
    """Remember that `url` answered but a clone of `commit` from it failed (defect 8 of issue 18:
    retrying it made every no-op apply remove and rebuild the stand-in)."""
    git(["config", CLONE_FAILED_KEY, f"{url} {commit}"], repo)


def clone_failed(repo: Path, url: str, commit: str) -> bool:
    """True if a clone of `commit` from `url` was already tried from this stand-in and failed."""
    return git_text(["config", "--get", CLONE_FAILED_KEY], repo, check=False) == f"{url} {commit}"


def record_cloned_from(repo: Path, url: str) -> None:
    git(["config", CLONED_FROM_KEY, url], repo)


def cloned_from(repo: Path) -> str:
    """The mirror apply cloned this checkout from ("" for the submodule URL itself)."""
    return git_text(["config", "--get", CLONED_FROM_KEY], repo, check=False)


def standin_spec(repo: Path) -> str:
    """`package==version` when the checkout is a release stand-in, "" for a clone."""
    return git_text(["config", "--get", STANDIN_KEY], repo, check=False)


def is_real_clone(repo: Path) -> bool:
    """True if `repo` is a git checkout holding upstream history (not a release stand-in)."""
    return is_repo(repo) and not standin_spec(repo)


def head_of(repo: Path) -> tuple[str, str]:
    """(symbolic ref or '', commit) of HEAD."""
    ref = git_text(["symbolic-ref", "-q", "HEAD"], repo, check=False)
    return ref, rev(repo, "HEAD")


def is_applied(repo: Path, digest: str) -> bool:
    """True if HEAD is branch `patched` exactly as apply left it for this digest (pin + series).

    Uncommitted changes are not looked at: apply's no-op test adds `not dirty_files(repo)`.
    """
    if not digest or git_text(["config", "--get", DIGEST_KEY], repo, check=False) != digest:
        return False
    ref, head = head_of(repo)
    return ref == BRANCH_REF and head == rev(repo, APPLIED_REF)


def record_applied(repo: Path, digest: str, names: list[str] | None = None) -> None:
    """Remember that HEAD's branch is the applied state of `digest` (see `is_applied`), and
    the series' patch names it was applied from (`applied_names`), when given."""
    git(["config", DIGEST_KEY, digest], repo)
    if names is not None:
        record_names(repo, names)


def record_names(repo: Path, names: list[str]) -> None:
    """Remember the patch names branch `patched` holds, in order (see `applied_names`)."""
    git(["config", NAMES_KEY, " ".join(names)], repo)


def applied_names(repo: Path) -> list[str] | None:
    """The patch names branch `patched` was applied (or exported) from; None if unrecorded."""
    value = git_text(["config", "--get", NAMES_KEY], repo, check=False)
    return value.split() if value else None


def move_branch(repo: Path, new_tip: str, old_tip: str, reason: str) -> bool:
    """Move branch `patched` old_tip -> new_tip (apply's commits rewritten, e.g. a reworded
    trailer). True when apply had made old_tip: `APPLIED_REF` follows, and the caller records
    the new digest with `record_applied`."""
    applied = rev(repo, APPLIED_REF)
    git(["update-ref", "-m", reason, BRANCH_REF, new_tip, old_tip], repo)
    if applied != old_tip:
        return False
    git(["update-ref", APPLIED_REF, new_tip], repo)
    return True


def patched_range(root: Path, up: Upstream) -> tuple[Path, str, str]:
    """(checkout, base commit, tip commit) of the patched branch; actionable error if absent."""
    repo = checkout_dir(root, up)
    if not is_repo(repo):
        raise PatchToolError(
            f"{up.name}: {up.path} is not a checkout; run tools/patches apply {up.name} first"
        )
    tip = rev(repo, BRANCH_REF)
    if not tip:
        raise PatchToolError(
            f"{up.name}: no branch {BRANCH} in {up.path}; run tools/patches apply {up.name} first"
        )
    base = rev(repo, PIN_REF) or up.commit
    if git_text(["merge-base", base, tip], repo, check=False) != base:
        raise PatchToolError(
            f"{up.name}: branch {BRANCH} does not descend from the pin {base[:12]}; "
            f"rebase it (git -C {up.path} rebase --onto {base[:12]} <old-base> {BRANCH})"
        )
    return repo, base, tip
