"""The rebase's scratch repository: an empty repo borrowing the upstreams' objects, checked
out sparsely (only the files the series touches), and the git questions the replay asks it.

Why apart from the replay (engine.py): these are git plumbing with no rebase decision in them;
`flow.py` and `pin.py` create and remove the scratch repository around the engine.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import git, git_bytes, git_text, patch_ids, rev, run
from ..model.series import Patch


def create_scratch(scratch: Path, object_sources: list[Path]) -> None:
    """An empty repository borrowing objects from `object_sources` (no copy, no ref changes there)."""
    if scratch.exists() and any(scratch.iterdir()):
        raise PatchToolError(
            f"{scratch}: scratch directory is not empty; remove it or pick another"
        )
    scratch.mkdir(parents=True, exist_ok=True)
    git(["init", "-q", str(scratch)], scratch)
    alternates = []
    for repo in object_sources:
        objects = Path(git_text(["rev-parse", "--git-path", "objects"], repo))
        alternates.append(str(objects if objects.is_absolute() else (repo / objects).resolve()))
    if alternates:
        alt_file = scratch / ".git" / "objects" / "info" / "alternates"
        alt_file.write_text("\n".join(alternates) + "\n", encoding="utf-8")
    for key, value in (
        ("user.name", "mcore-rl-stack rebase"),
        ("user.email", "rebase@mcore-rl-stack.invalid"),
        ("gc.auto", "0"),
        ("core.hooksPath", "/dev/null"),
        ("advice.detachedHead", "false"),
    ):
        git(["config", key, value], scratch)


def checkout_commit(scratch: Path, commit: str) -> None:
    git(["checkout", "-q", "-f", "--detach", commit], scratch)
    # `read-tree` primes the index's cache-tree, so `git am`'s write-tree reuses the trees of
    # untouched directories instead of re-checking every blob: mirrors that lack large blobs
    # (Bridge's gifs) then still work. `reapply` restores the sparse skip-worktree bits.
    git(["read-tree", commit], scratch)
    git(["sparse-checkout", "reapply"], scratch)
    git(["clean", "-q", "-fdx"], scratch)


def am_apply(
    scratch: Path, patch_file: Path, three_way: bool
) -> subprocess.CompletedProcess[bytes]:
    args = ["am", "--quiet", "-k", "--no-keep-cr"]  # -k: keep subjects as `apply` does
    args += ["-3"] if three_way else ["--no-3way"]
    return run([*args, str(patch_file)], scratch)


def head_of_scratch(scratch: Path) -> str:
    return git_text(["rev-parse", "HEAD"], scratch)


def am_in_progress(scratch: Path) -> bool:
    return (scratch / ".git" / "rebase-apply").exists()


def upstream_patch_ids(scratch: Path, old: str, new: str, paths: list[str]) -> dict[str, str]:
    """patch-id -> upstream commit, for non-merge commits in old..new that touch `paths`."""
    if not paths:
        return {}
    shas = git_text(
        ["rev-list", "--no-merges", f"{old}..{new}", "--", *sorted(set(paths))], scratch
    )
    if not shas:
        return {}
    log = git_bytes(
        ["log", "--no-walk=unsorted", "-p", "--full-index", "--no-color", "--stdin"],
        scratch,
        input=shas + "\n",
    )
    ids: dict[str, str] = {}
    for pid, sha in patch_ids(scratch, log):
        ids.setdefault(pid, sha)
    return ids


def accepted_commit(patch: Patch) -> str:
    for value in patch.trailer_values("Upstream-Status"):
        parts = value.split()
        if len(parts) >= 2 and parts[0] == "accepted":
            return parts[1]
    return ""


_SUBMITTED_RE = re.compile(r"^submitted\s+\S*/pull/(\d+)\b")
_MERGED_SUBJECT_RE = re.compile(r"\(#(\d+)\)\s*$|^Merge pull request #(\d+) ")


def submitted_pr(patch: Patch) -> int:
    """The upstream PR number of `Upstream-Status: submitted <.../pull/N>` (ours, or an adopted
    upstream PR), 0 when none."""
    for value in patch.trailer_values("Upstream-Status"):
        if m := _SUBMITTED_RE.match(value):
            return int(m.group(1))
    return 0


def merged_prs(scratch: Path, old: str, new: str) -> dict[int, str]:
    """PR number -> the commit of old..new whose subject says it merged (`... (#N)`, squash; or
    `Merge pull request #N ...`)."""
    out: dict[int, str] = {}
    log = git(["log", "--format=%H %s", f"{old}..{new}"], scratch, check=False)
    for line in log.splitlines():
        sha, _, subject = line.partition(" ")
        if m := _MERGED_SUBJECT_RE.search(subject):
            out.setdefault(int(m.group(1) or m.group(2)), sha)
    return out


def resolve_commit(scratch: Path, name: str, history_repos: list[Path]) -> str:
    for repo in [scratch, *history_repos]:
        sha = rev(repo, f"{name}^{{commit}}")
        if sha:
            return sha
    return ""


def is_ancestor(scratch: Path, commit: str, of: str) -> bool:
    return run(["merge-base", "--is-ancestor", commit, of], scratch).returncode == 0


def _pattern(path: str) -> str:
    """A non-cone sparse-checkout pattern matching exactly `path` (gitignore syntax)."""
    escaped = "".join("\\" + ch if ch in "*?[]\\!#" else ch for ch in path)
    return "/" + escaped.rstrip(" ")


def sparse_checkout(scratch: Path, paths: list[str]) -> None:
    """Check out only the files the series touches.

    Why: a full upstream tree costs seconds per checkout, and mirrors may lack large blobs
    (Bridge's gifs) that a full checkout would need. A tripwire hook that needs the whole
    tree can read it with `git -C <scratch> archive HEAD` or widen the checkout.
    """
    git(["config", "core.sparseCheckout", "true"], scratch)
    git(["config", "core.sparseCheckoutCone", "false"], scratch)
    info = scratch / ".git" / "info"
    info.mkdir(exist_ok=True)
    patterns = sorted({_pattern(p) for p in paths})
    # An empty pattern list would check out nothing *and* warn; a never-matching one is quiet.
    (info / "sparse-checkout").write_text("\n".join(patterns or ["/.patchtool-none"]) + "\n")


def remove_scratch(scratch: Path) -> None:
    shutil.rmtree(scratch, ignore_errors=True)


_OFFSET_RE = re.compile(r"^Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)\.$")
_CHECKING_RE = re.compile(r"^Checking patch (.+)\.\.\.$")
_FAILED_RE = re.compile(r"^error: patch failed: (.+):(\d+)$")


def parse_offsets(stderr: str) -> list[str]:
    """The hunks `git apply -v` placed at shifted lines, one line each."""
    offsets: list[str] = []
    current = ""
    for line in stderr.splitlines():
        checking = _CHECKING_RE.match(line)
        if checking:
            current = checking.group(1)
            continue
        match = _OFFSET_RE.match(line)
        if match:
            num, at, off = match.groups()
            offsets.append(f"{current}: hunk #{num} at line {at} (offset {int(off):+d})")
    return offsets


def failed_files(stderr: str) -> list[str]:
    """The files whose hunks `git apply` could not place."""
    return sorted({m.group(1) for m in map(_FAILED_RE.match, stderr.splitlines()) if m})
