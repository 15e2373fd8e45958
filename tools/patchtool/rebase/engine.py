"""Replay a patch series on a new upstream base in a scratch repository and classify each patch.

The engine is independent of where the bases come from (git history or release stand-ins,
see `bases.py`) and of what is done with the result (`flow.py` and `write.py` rewrite the
series and move the pin; `pin --follow` reuses the same engine), so it returns plain data.

Classifications (strictness first; "applies" always means exact context, never fuzz):
  clean        every hunk applies at its recorded line numbers
  offset       every hunk applies with exact context, some at shifted lines (`git apply -v`
               reports "(offset N lines)"); re-export regenerates line numbers and blob ids
  merged-3way  exact application fails, `git am -3` merges it without conflict
  conflict     `git am -3` leaves conflict markers
  upstreamed   the change is already in the new base; evidence (any fires):
               patch-id   identical `git patch-id --stable` among commits old..new touching its files
               accepted   its `Upstream-Status: accepted <commit>` is an ancestor of the new base
               reverse    `git apply -R --check` succeeds on the new base (post-image present)
               tripwire   the caller's hook reports the tripwire test passing without the patch
               merge-noop exact application fails but `git am -3` finds nothing to change
                          ("Patch already applied"): the change is there, its context moved on
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..core.git import git, git_bytes, git_text, patch_id, patch_ids, rev, run
from ..core.series import Patch, parse_patch_text
from ..errors import PatchToolError

CLEAN = "clean"
OFFSET = "offset"
MERGED_3WAY = "merged-3way"
CONFLICT = "conflict"
UPSTREAMED = "upstreamed"
RESOLVED = "resolved-by-hand"
KEPT = (CLEAN, OFFSET, MERGED_3WAY, RESOLVED)

STATE_FILE = "patches-rebase.json"
PATCH_DIR = "patches-rebase"

_OFFSET_RE = re.compile(r"^Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)\.$")
_CHECKING_RE = re.compile(r"^Checking patch (.+)\.\.\.$")
_FAILED_RE = re.compile(r"^error: patch failed: (.+):(\d+)$")


@dataclass(frozen=True)
class Base:
    """One side of a rebase: a commit in the scratch repository and what it stands for.

    `label` names it for people (a tag, a commit, or "megatron-core 0.17.0 stand-in");
    `upstream_commit` is the real upstream commit id (the gitlink), "" when unknown offline;
    `history` is True when `commit` is the real upstream commit with its ancestry.
    """

    label: str
    commit: str
    history: bool
    upstream_commit: str = ""
    tag: str = ""
    standin_version: str = ""
    date: str = ""  # committer date of `upstream_commit` (ISO 8601), when read from history
    resolved_from: str = ""  # where the ref was read: "<url> (now)" or a local clone


@dataclass
class Evidence:
    kind: str  # patch-id | accepted | reverse | tripwire
    detail: str
    commit: str = ""  # the upstream commit it points at (patch-id, accepted)


@dataclass
class PatchResult:
    name: str
    subject: str
    classification: str = ""
    evidence: list[Evidence] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    offsets: list[str] = field(default_factory=list)  # "path: hunk #2 at 120 (offset +5)"
    failed_files: list[str] = field(default_factory=list)
    hunks: str = ""  # merged hunks (merged-3way) or conflict diff with markers (conflict)
    conflict_files: list[str] = field(default_factory=list)
    old_commit: str = ""
    new_commit: str = ""
    note: str = ""


@dataclass
class RebaseResult:
    upstream: str
    old: Base
    new: Base
    scratch: str
    patches: list[PatchResult]
    old_tip: str = ""
    new_tip: str = ""
    range_diff: str = ""
    finish_commands: list[list[str]] = field(default_factory=list)
    backwards: bool = False  # the new base is an ancestor of the old pin

    @property
    def conflicts(self) -> list[PatchResult]:
        return [p for p in self.patches if p.classification == CONFLICT]

    @property
    def kept(self) -> list[PatchResult]:
        return [p for p in self.patches if p.classification in KEPT]

    @property
    def upstreamed(self) -> list[PatchResult]:
        return [p for p in self.patches if p.classification == UPSTREAMED]

    def to_json(self) -> dict[str, object]:
        return asdict(self)


# A tripwire hook gets (patch name, parsed patch, worktree of the new base without this patch)
# and returns True when the patch's tripwire test passes there (the bug is gone), False when
# it still fails, None when it could not be run. The coordinator wires pytest into it.
TripwireHook = Callable[[str, Patch, Path], bool | None]


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


# --- scratch repository ----------------------------------------------------------------------


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


def _checkout(scratch: Path, commit: str) -> None:
    git(["checkout", "-q", "-f", "--detach", commit], scratch)
    # `read-tree` primes the index's cache-tree, so `git am`'s write-tree reuses the trees of
    # untouched directories instead of re-checking every blob: mirrors that lack large blobs
    # (Bridge's gifs) then still work. `reapply` restores the sparse skip-worktree bits.
    git(["read-tree", commit], scratch)
    git(["sparse-checkout", "reapply"], scratch)
    git(["clean", "-q", "-fdx"], scratch)


def _am(scratch: Path, patch_file: Path, three_way: bool) -> subprocess.CompletedProcess[bytes]:
    args = ["am", "--quiet", "-k", "--no-keep-cr"]  # -k: keep subjects as `apply` does
    args += ["-3"] if three_way else ["--no-3way"]
    return run([*args, str(patch_file)], scratch)


def _head(scratch: Path) -> str:
    return git_text(["rev-parse", "HEAD"], scratch)


def _am_in_progress(scratch: Path) -> bool:
    return (scratch / ".git" / "rebase-apply").exists()


# --- evidence ---------------------------------------------------------------------------------


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


def _accepted_commit(patch: Patch) -> str:
    for value in patch.trailer_values("Upstream-Status"):
        parts = value.split()
        if len(parts) >= 2 and parts[0] == "accepted":
            return parts[1]
    return ""


def _resolve(scratch: Path, name: str, history_repos: list[Path]) -> str:
    for repo in [scratch, *history_repos]:
        sha = rev(repo, f"{name}^{{commit}}")
        if sha:
            return sha
    return ""


def _is_ancestor(scratch: Path, commit: str, of: str) -> bool:
    return run(["merge-base", "--is-ancestor", commit, of], scratch).returncode == 0


# --- replay -----------------------------------------------------------------------------------


@dataclass
class _Input:
    name: str
    data: bytes
    patch: Patch
    file: Path


def _parse_offsets(stderr: str) -> list[str]:
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


def _failed_files(stderr: str) -> list[str]:
    return sorted({m.group(1) for m in map(_FAILED_RE.match, stderr.splitlines()) if m})


class Replayer:
    """Applies a list of patches one by one on the scratch HEAD and classifies each."""

    def __init__(
        self,
        scratch: Path,
        old: Base,
        new: Base,
        history_repos: list[Path],
        tripwire: TripwireHook | None,
    ) -> None:
        self.scratch = scratch
        self.old = old
        self.new = new
        self.history_repos = history_repos
        self.tripwire = tripwire
        self._patch_ids: dict[str, str] | None = None

    def _upstream_ids(self, inputs: list[_Input]) -> dict[str, str]:
        if self._patch_ids is None:
            paths = [
                p for i in inputs for f in i.patch.files for p in (f.old_path, f.new_path) if p
            ]
            self._patch_ids = upstream_patch_ids(
                self.scratch, self.old.commit, self.new.commit, paths
            )
        return self._patch_ids

    def evidence(self, item: _Input, inputs: list[_Input], result: PatchResult) -> None:
        scratch = self.scratch
        if self.old.history and self.new.history:
            pid = patch_id(scratch, item.data)
            hit = self._upstream_ids(inputs).get(pid)
            if hit:
                result.evidence.append(
                    Evidence("patch-id", f"identical to upstream {hit[:12]}", hit)
                )
        else:
            result.not_checked.append("patch-id (no upstream history for a stand-in base)")
        accepted = _accepted_commit(item.patch)
        if accepted:
            if not self.new.history:
                result.not_checked.append(f"accepted {accepted} (no upstream history)")
            else:
                sha = _resolve(scratch, accepted, self.history_repos)
                if not sha:
                    result.not_checked.append(f"accepted {accepted} (commit not found)")
                elif _is_ancestor(scratch, sha, self.new.commit):
                    result.evidence.append(
                        Evidence(
                            "accepted", f"{accepted} is an ancestor of {self.new.label}", accepted
                        )
                    )
        reverse = run(["apply", "-R", "--check", str(item.file)], scratch)
        if reverse.returncode == 0:
            result.evidence.append(
                Evidence("reverse", f"the patch reverse-applies on {self.new.label}")
            )
        if self.tripwire is not None:
            verdict = self.tripwire(item.name, item.patch, scratch)
            if verdict is True:
                tests = ", ".join(item.patch.trailer_values("Test")) or "tripwire"
                result.evidence.append(Evidence("tripwire", f"{tests} passes without the patch"))
            elif verdict is None:
                result.not_checked.append("tripwire (hook could not run the test)")
        else:
            result.not_checked.append("tripwire (no test hook given)")

    def _noop_evidence(self) -> Evidence:
        return Evidence(
            "merge-noop", f"a 3-way merge of the patch changes nothing on {self.new.label}"
        )

    def _merge_is_noop(self, item: _Input) -> bool:
        """Would `git am -3` find the patch already applied? HEAD and tree are restored."""
        before = _head(self.scratch)
        proc = _am(self.scratch, item.file, three_way=True)
        noop = proc.returncode == 0 and _head(self.scratch) == before
        if _am_in_progress(self.scratch):
            run(["am", "--abort"], self.scratch)
        _checkout(self.scratch, before)
        return noop

    def classify(self, item: _Input, inputs: list[_Input]) -> PatchResult:
        """Classify one patch against HEAD; on success HEAD advances by its commit."""
        scratch = self.scratch
        result = PatchResult(item.name, item.patch.subject)
        self.evidence(item, inputs, result)
        forward = run(["apply", "--check", "-v", str(item.file)], scratch)
        if result.evidence:
            result.classification = UPSTREAMED
            if forward.returncode == 0:
                result.note = "evidence says upstreamed, yet the patch still applies: review it"
            elif {e.kind for e in result.evidence} == {"accepted"}:
                # Only our own trailer says so: look for the change itself as well.
                if self._merge_is_noop(item):
                    result.evidence.append(self._noop_evidence())
                else:
                    result.note = (
                        "only the Upstream-Status trailer says so; the change itself was not found"
                    )
            return result
        stderr = _text(forward.stderr)
        if forward.returncode == 0:
            proc = _am(scratch, item.file, three_way=False)
            if proc.returncode != 0:  # `git apply --check` passed, so this is unexpected
                raise PatchToolError(
                    f"{item.name}: git am failed in {scratch}: {_text(proc.stderr)}"
                )
            result.offsets = _parse_offsets(stderr)
            result.classification = OFFSET if result.offsets else CLEAN
            result.new_commit = _head(scratch)
            return result
        result.failed_files = _failed_files(stderr)
        before = _head(scratch)
        proc = _am(scratch, item.file, three_way=True)
        if proc.returncode == 0 and _head(scratch) == before:
            # git am: "No changes -- Patch already applied.": merging our change into the
            # new base leaves it as is, so the base already contains the change (with
            # context edited around it, which is why the strict reverse check missed it).
            result.classification = UPSTREAMED
            result.evidence.append(self._noop_evidence())
            return result
        if proc.returncode == 0:
            result.classification = MERGED_3WAY
            result.new_commit = _head(scratch)
            shown = git(
                ["show", "--format=", "--no-color", result.new_commit, "--", *result.failed_files],
                scratch,
            )
            result.hunks = shown
            return result
        result.classification = CONFLICT
        unmerged = git_text(["diff", "--name-only", "--diff-filter=U"], scratch)
        result.conflict_files = [x for x in unmerged.splitlines() if x]
        if not result.conflict_files:  # e.g. a missing file: am -3 cannot even merge
            result.conflict_files = result.failed_files
            result.note = _text(proc.stderr).strip().splitlines()[-1] if proc.stderr else ""
        diff = git(["diff", "--no-color"], scratch)
        result.hunks = diff
        return result


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


def _write_inputs(scratch: Path, patches: list[tuple[str, bytes]]) -> list[_Input]:
    directory = scratch / ".git" / PATCH_DIR
    directory.mkdir(exist_ok=True)
    inputs = []
    for name, data in patches:
        file = directory / name
        file.write_bytes(data)
        patch = parse_patch_text(data.decode("utf-8", errors="surrogateescape"), Path(name))
        inputs.append(_Input(name, data, patch, file))
    return inputs


def build_old_series(scratch: Path, old: Base, inputs: list[_Input]) -> list[str]:
    """Apply the series strictly on the old base; the commits feed range-diff and 3-way blobs."""
    _checkout(scratch, old.commit)
    commits = []
    for item in inputs:
        proc = _am(scratch, item.file, three_way=False)
        if proc.returncode != 0:
            run(["am", "--abort"], scratch)
            raise PatchToolError(
                f"{item.name} does not apply to the current pin {old.label}: "
                f"{_text(proc.stderr).strip().splitlines()[-1] if proc.stderr.strip() else ''}; "
                "fix the series first (tools/patches apply shows why)"
            )
        commits.append(_head(scratch))
    return commits


def _finish_commands(result: RebaseResult, first: int) -> list[list[str]]:
    """Exact commands to resolve the first conflict by hand and let the tool continue."""
    conflict = result.patches[first]
    return [
        ["cd", result.scratch],
        ["git", "diff"],
        ["git", "add", "--", *conflict.conflict_files],
        ["git", "am", "--continue"],
        ["tools/patches", "rebase", result.upstream, "--resume", result.scratch],
    ]


def _save_state(result: RebaseResult, first: int, history: list[Path]) -> None:
    state = {
        "result": result.to_json(),
        "conflict_index": first,
        "history_repos": [str(p) for p in history],
    }
    path = Path(result.scratch) / ".git" / STATE_FILE
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _range_diff(scratch: Path, old: Base, old_tip: str, new: Base, new_tip: str) -> str:
    proc = run(
        ["range-diff", "--no-color", f"{old.commit}..{old_tip}", f"{new.commit}..{new_tip}"],
        scratch,
    )
    return (
        _text(proc.stdout) if proc.returncode == 0 else f"(range-diff failed: {_text(proc.stderr)})"
    )


def rebase_series(
    upstream: str,
    patches: list[tuple[str, bytes]],
    old: Base,
    new: Base,
    scratch: Path,
    *,
    history_repos: list[Path] | None = None,
    tripwire: TripwireHook | None = None,
) -> RebaseResult:
    """Replay `patches` (name, mbox bytes) from `old` onto `new` inside an existing scratch repo.

    Both bases must be commits in `scratch` (see `create_scratch` and `bases.py`). Nothing
    outside `scratch` is touched. With a conflict, every later patch is still classified
    (on the tree without the conflicting patch), then the scratch tree is put back at the
    first conflict with its markers and `finish_commands` says how to finish by hand.
    """
    history = history_repos or []
    inputs = _write_inputs(scratch, patches)
    sparse_checkout(
        scratch, [p for i in inputs for f in i.patch.files for p in (f.old_path, f.new_path) if p]
    )
    old_commits = build_old_series(scratch, old, inputs)
    result = RebaseResult(upstream, old, new, str(scratch), [], old_tip=_head(scratch))
    _checkout(scratch, new.commit)
    replayer = Replayer(scratch, old, new, history, tripwire)
    _replay(result, replayer, inputs, old_commits, start=0)
    return result


def _replay(
    result: RebaseResult,
    replayer: Replayer,
    inputs: list[_Input],
    old_commits: list[str],
    start: int,
) -> None:
    scratch = replayer.scratch
    first_conflict: tuple[int, str] | None = None  # (index, HEAD before it)
    for index in range(start, len(inputs)):
        item = inputs[index]
        before = _head(scratch)
        res = replayer.classify(item, inputs)
        res.old_commit = old_commits[index] if index < len(old_commits) else ""
        result.patches.append(res)
        if res.classification == CONFLICT:
            if first_conflict is None:
                first_conflict = (index, before)
            run(["am", "--abort"], scratch)
            _checkout(scratch, before)
            if res.conflict_files:
                res.note = (res.note + "; " if res.note else "") + (
                    "later patches were classified without this one"
                )
    result.new_tip = _head(scratch)
    result.range_diff = _range_diff(scratch, result.old, result.old_tip, result.new, result.new_tip)
    if first_conflict is not None:
        index, before = first_conflict
        _checkout(scratch, before)
        _am(scratch, inputs[index].file, three_way=True)  # leave the markers for the person
        result.finish_commands = _finish_commands(result, index)
        _save_state(result, index, replayer.history_repos)


def _result_from_json(data: dict[str, object]) -> RebaseResult:
    raw = dict(data)
    patches = []
    for item in raw.pop("patches"):  # type: ignore[union-attr]
        entry = dict(item)
        entry["evidence"] = [Evidence(**e) for e in entry["evidence"]]
        patches.append(PatchResult(**entry))
    old = Base(**raw.pop("old"))  # type: ignore[arg-type]
    new = Base(**raw.pop("new"))  # type: ignore[arg-type]
    return RebaseResult(old=old, new=new, patches=patches, **raw)  # type: ignore[arg-type]


def resume_series(scratch: Path, *, tripwire: TripwireHook | None = None) -> RebaseResult:
    """Continue after the first conflict was resolved by hand (`git am --continue` done).

    The resolved commit is taken as is (class `resolved-by-hand`); every later patch is
    classified again on top of it.
    """
    state_file = scratch / ".git" / STATE_FILE
    if not state_file.is_file():
        raise PatchToolError(f"{scratch}: no interrupted rebase here ({state_file} missing)")
    if _am_in_progress(scratch):
        raise PatchToolError(
            f"{scratch}: git am still in progress; resolve the markers, `git add` the files "
            "and run `git am --continue` there first"
        )
    state = json.loads(state_file.read_text(encoding="utf-8"))
    result = _result_from_json(state["result"])
    index = int(state["conflict_index"])
    history = [Path(p) for p in state["history_repos"]]
    names = [p.name for p in result.patches]
    old_commits = [p.old_commit for p in result.patches]
    inputs = []
    for name in names:
        file = scratch / ".git" / PATCH_DIR / name
        data = file.read_bytes()
        patch = parse_patch_text(data.decode("utf-8", errors="surrogateescape"), Path(name))
        inputs.append(_Input(name, data, patch, file))
    before = next(
        (p.new_commit for p in reversed(result.patches[:index]) if p.new_commit), result.new.commit
    )
    head = _head(scratch)
    if git_text(["rev-parse", f"{head}^"], scratch) != before:
        raise PatchToolError(
            f"{scratch}: expected exactly one resolved commit on {before[:12]} for "
            f"{names[index]}, HEAD is {head[:12]}; reset it (git reset --hard {before[:12]}) and "
            f"apply {names[index]} again with git am -3"
        )
    resolved = result.patches[index]
    resolved.classification = RESOLVED
    resolved.new_commit = head
    resolved.note = ""
    result.patches = result.patches[: index + 1]
    result.finish_commands = []
    state_file.unlink()
    replayer = Replayer(scratch, result.old, result.new, history, tripwire)
    _replay(result, replayer, inputs, old_commits, start=index + 1)
    return result


def remove_scratch(scratch: Path) -> None:
    shutil.rmtree(scratch, ignore_errors=True)
