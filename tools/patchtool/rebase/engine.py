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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import git, git_text, patch_id, run
from ..model.series import Patch, parse_patch_text
from .result import (
    CLEAN,
    CONFLICT,
    MERGED_3WAY,
    OFFSET,
    RESOLVED,
    UPSTREAMED,
    Base,
    Evidence,
    PatchResult,
    RebaseResult,
    result_from_json,
)
from .scratch import (
    accepted_commit,
    am_apply,
    am_in_progress,
    checkout_commit,
    failed_files,
    head_of_scratch,
    is_ancestor,
    merged_prs,
    parse_offsets,
    resolve_commit,
    sparse_checkout,
    submitted_pr,
    upstream_patch_ids,
)

STATE_FILE = "patches-rebase.json"
PATCH_DIR = "patches-rebase"


# A tripwire hook gets (patch name, parsed patch, worktree of the new base without this patch)
# and returns True when the patch's tripwire test passes there (the bug is gone), False when
# it still fails, None when it could not be run. The coordinator wires pytest into it.
TripwireHook = Callable[[str, Patch, Path], bool | None]


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


# --- replay -----------------------------------------------------------------------------------


@dataclass
class _Input:
    name: str
    data: bytes
    patch: Patch
    file: Path


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
        self._merged: dict[int, str] | None = None

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
        self._pr_evidence(item, result)
        accepted = accepted_commit(item.patch)
        if accepted:
            if not self.new.history:
                result.not_checked.append(f"accepted {accepted} (no upstream history)")
            else:
                sha = resolve_commit(scratch, accepted, self.history_repos)
                if not sha:
                    result.not_checked.append(f"accepted {accepted} (commit not found)")
                elif is_ancestor(scratch, sha, self.new.commit):
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

    def _pr_evidence(self, item: _Input, result: PatchResult) -> None:
        """`pr-merged`: the patch's submitted upstream PR (ours, or one adopted) merged in
        old..new (a `(#N)` subject): "merged upstream as #N"."""
        number = submitted_pr(item.patch)
        if not number or not (self.old.history and self.new.history):
            return
        if self._merged is None:
            self._merged = merged_prs(self.scratch, self.old.commit, self.new.commit)
        if sha := self._merged.get(number):
            result.evidence.append(
                Evidence("pr-merged", f"merged upstream as #{number} ({sha[:12]})", sha)
            )

    def _noop_evidence(self) -> Evidence:
        return Evidence(
            "merge-noop", f"a 3-way merge of the patch changes nothing on {self.new.label}"
        )

    def _merge_is_noop(self, item: _Input) -> bool:
        """Would `git am -3` find the patch already applied? HEAD and tree are restored."""
        before = head_of_scratch(self.scratch)
        proc = am_apply(self.scratch, item.file, three_way=True)
        noop = proc.returncode == 0 and head_of_scratch(self.scratch) == before
        if am_in_progress(self.scratch):
            run(["am", "--abort"], self.scratch)
        checkout_commit(self.scratch, before)
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
            elif {e.kind for e in result.evidence} <= {"accepted", "pr-merged"}:
                # Only a trailer (or the PR's merge) says so: look for the change itself too.
                if self._merge_is_noop(item):
                    result.evidence.append(self._noop_evidence())
                else:
                    result.note = (
                        "only the Upstream-Status trailer says so; the change itself was not found"
                    )
            return result
        stderr = _text(forward.stderr)
        if forward.returncode == 0:
            proc = am_apply(scratch, item.file, three_way=False)
            if proc.returncode != 0:  # `git apply --check` passed, so this is unexpected
                raise PatchToolError(
                    f"{item.name}: git am failed in {scratch}: {_text(proc.stderr)}"
                )
            result.offsets = parse_offsets(stderr)
            result.classification = OFFSET if result.offsets else CLEAN
            result.new_commit = head_of_scratch(scratch)
            return result
        result.failed_files = failed_files(stderr)
        before = head_of_scratch(scratch)
        proc = am_apply(scratch, item.file, three_way=True)
        if proc.returncode == 0 and head_of_scratch(scratch) == before:
            # git am: "No changes -- Patch already applied.": merging our change into the
            # new base leaves it as is, so the base already contains the change (with
            # context edited around it, which is why the strict reverse check missed it).
            result.classification = UPSTREAMED
            result.evidence.append(self._noop_evidence())
            return result
        if proc.returncode == 0:
            result.classification = MERGED_3WAY
            result.new_commit = head_of_scratch(scratch)
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
    checkout_commit(scratch, old.commit)
    commits = []
    for item in inputs:
        proc = am_apply(scratch, item.file, three_way=False)
        if proc.returncode != 0:
            run(["am", "--abort"], scratch)
            raise PatchToolError(
                f"{item.name} does not apply to the current pin {old.label}: "
                f"{_text(proc.stderr).strip().splitlines()[-1] if proc.stderr.strip() else ''}; "
                "fix the series first (tools/patches apply shows why)"
            )
        commits.append(head_of_scratch(scratch))
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
    result = RebaseResult(upstream, old, new, str(scratch), [], old_tip=head_of_scratch(scratch))
    result.lacks = lacked_commits(scratch, old, new)
    checkout_commit(scratch, new.commit)
    replayer = Replayer(scratch, old, new, history, tripwire)
    _replay(result, replayer, inputs, old_commits, start=0)
    return result


def lacked_commits(scratch: Path, old: Base, new: Base) -> int:
    """Commits of the old pin the new base does not have (a release branch cut beside main):
    conflicts may come from them rather than from what the new base adds. 0 without history."""
    if not (old.history and new.history) or old.commit == new.commit:
        return 0
    count = git_text(["rev-list", "--count", f"{new.commit}..{old.commit}"], scratch, check=False)
    return int(count) if count.isdigit() else 0


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
        before = head_of_scratch(scratch)
        res = replayer.classify(item, inputs)
        res.old_commit = old_commits[index] if index < len(old_commits) else ""
        result.patches.append(res)
        if res.classification == CONFLICT:
            if first_conflict is None:
                first_conflict = (index, before)
            run(["am", "--abort"], scratch)
            checkout_commit(scratch, before)
            if res.conflict_files:
                res.note = (res.note + "; " if res.note else "") + (
                    "later patches were classified without this one"
                )
    result.new_tip = head_of_scratch(scratch)
    if inputs:  # an empty series has no ranges to compare (range-diff refuses them)
        result.range_diff = _range_diff(
            scratch, result.old, result.old_tip, result.new, result.new_tip
        )
    if first_conflict is not None:
        index, before = first_conflict
        checkout_commit(scratch, before)
        am_apply(scratch, inputs[index].file, three_way=True)  # leave the markers for the person
        result.finish_commands = _finish_commands(result, index)
        _save_state(result, index, replayer.history_repos)


def resume_series(scratch: Path, *, tripwire: TripwireHook | None = None) -> RebaseResult:
    """Continue after the first conflict was resolved by hand (`git am --continue` done).

    The resolved commit is taken as is (class `resolved-by-hand`); every later patch is
    classified again on top of it.
    """
    state_file = scratch / ".git" / STATE_FILE
    if not state_file.is_file():
        raise PatchToolError(f"{scratch}: no interrupted rebase here ({state_file} missing)")
    if am_in_progress(scratch):
        raise PatchToolError(
            f"{scratch}: git am still in progress; resolve the markers, `git add` the files "
            "and run `git am --continue` there first"
        )
    state = json.loads(state_file.read_text(encoding="utf-8"))
    result = result_from_json(state["result"])
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
    head = head_of_scratch(scratch)
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
