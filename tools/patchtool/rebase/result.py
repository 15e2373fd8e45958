"""What a rebase found, as plain data: the two bases, each patch's classification and the
evidence for it (see engine.py for the classifications). Saved as JSON between `rebase`
and `rebase --continue`, rendered by report.py, acted on by write.py."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

CLEAN = "clean"
OFFSET = "offset"
MERGED_3WAY = "merged-3way"
CONFLICT = "conflict"
UPSTREAMED = "upstreamed"
RESOLVED = "resolved-by-hand"
KEPT = (CLEAN, OFFSET, MERGED_3WAY, RESOLVED)


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
    lacks: int = 0  # commits of the old pin the new base does not have (git history only)

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


def result_from_json(data: dict[str, object]) -> RebaseResult:
    raw = dict(data)
    patches = []
    for item in raw.pop("patches"):  # type: ignore[union-attr]
        entry = dict(item)
        entry["evidence"] = [Evidence(**e) for e in entry["evidence"]]
        patches.append(PatchResult(**entry))
    old = Base(**raw.pop("old"))  # type: ignore[arg-type]
    new = Base(**raw.pop("new"))  # type: ignore[arg-type]
    return RebaseResult(old=old, new=new, patches=patches, **raw)  # type: ignore[arg-type]
