"""Changed lines of a diff and how they meet: the pure part of `prs` (no git here).

Why line intervals: a PR matters to a patch when it changes the lines the patch changes (a
conflict, or the same fix) or lines next to them; both sides are reduced to `Change`s in the
pin's coordinates, compared by position, then by the text of the changed lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_FILE_RE = re.compile(r"^\+\+\+ (?:b/(.*)|/dev/null)$")
_OLD_RE = re.compile(r"^--- (?:a/(.*)|/dev/null)$")
NEAR = 10  # lines between two changes that still make a PR "nearby"
SAME_FIX_SHARE = 0.8  # share of our changed lines (outside tests) a same-fix PR must contain


@dataclass
class Change:
    """One run of changed lines: old lines [start, end) removed (end == start: an insertion
    before line `start`), `removed`/`added` their texts."""

    start: int
    end: int
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)

    def span(self) -> tuple[int, int]:
        """The old lines it occupies; an insertion occupies the line it goes before."""
        return self.start, max(self.end, self.start + 1)


FileChanges = dict[str, list[Change]]


def parse_diff(lines: Sequence[str]) -> FileChanges:
    """Path -> changes of a unified diff (any context); the old side's path for deletions."""
    out: FileChanges = {}
    path, old_path, current = "", "", None
    old_line = 0
    for line in lines:
        if line.startswith("--- ") and (m := _OLD_RE.match(line)):
            old_path, current = m.group(1) or "", None
        elif line.startswith("+++ ") and (m := _FILE_RE.match(line)):
            path, current = m.group(1) or old_path, None
            out.setdefault(path, [])
        elif line.startswith("@@") and (m := _HUNK_RE.match(line)):
            old_line, current = int(m.group(1)) + (m.group(2) == "0"), None
        elif not path or not line or line[0] not in " +-":
            continue
        elif line[0] == " ":
            old_line, current = old_line + 1, None
        else:
            if current is None:
                current = Change(old_line, old_line)
                out[path].append(current)
            if line[0] == "-":
                current.removed.append(line[1:])
                current.end = old_line = old_line + 1
            else:
                current.added.append(line[1:])
    return out


Move = tuple[int, int, int]  # fork->pin: old lines [start, end) became `count` lines


def parse_moves(lines: Sequence[str]) -> dict[str, list[Move]]:
    """Path -> moves of a `-U0` diff read from its `+++` and `@@` lines alone (what the cache
    keeps of fork->pin diffs, which span years of upstream history)."""
    out: dict[str, list[Move]] = {}
    path = old_path = ""
    for line in lines:
        if line.startswith("--- ") and (m := _OLD_RE.match(line)):
            old_path = m.group(1) or ""
        elif line.startswith("+++ ") and (m := _FILE_RE.match(line)):
            path = m.group(1) or old_path
            out.setdefault(path, [])
        elif line.startswith("@@") and path and (m := _HUNK_RE.match(line)):
            old_count = int(m.group(2) or "1")
            start = int(m.group(1)) + (old_count == 0)
            out[path].append((start, start + old_count, int(m.group(4) or "1")))
    return out


def shift(line: int, moves: list[Move]) -> int:
    """Where old line `line` of the PR's fork point sits at the pin, given the fork->pin moves
    of that file (a line the pin changed maps to the start of that change)."""
    delta = 0
    for start, end, count in moves:
        if line < start:
            break
        if line < end:
            return start + delta
        delta += count - (end - start)
    return line + delta


def _rewritten(c: Change, moves: list[Move]) -> bool:
    """Whether lines `c` changes were themselves changed between the fork point and the pin:
    the PR's change is then on code the pin no longer has (or does not have yet)."""
    c0, c1 = c.span()
    return any(end > start and start < c1 and c0 < end for start, end, _ in moves)


def onto_pin(changes: list[Change], moves: list[Move]) -> list[Change]:
    """`changes` of a PR moved from its fork point's coordinates onto the pin's; those on lines
    rewritten between the two are left out (they touch code the pin does not have)."""
    out = []
    for c in changes:
        if _rewritten(c, moves):
            continue
        start = shift(c.start, moves)
        end = max(start, shift(c.end, moves)) if c.end > c.start else start
        out.append(Change(start, end, c.removed, c.added))
    return out


def _distance(a: Change, b: Change) -> int:
    (a0, a1), (b0, b1) = a.span(), b.span()
    return max(a0 - b1, b0 - a1, -1) + 1  # 0: they overlap


def _texts(items: list[str]) -> list[str]:
    return [t.strip() for t in items if t.strip()]


def _is_test(path: str) -> bool:
    return any(part.startswith("test") or part == "tests" for part in path.split("/"))


_NAME_RE = re.compile(r"[A-Za-z_]\w{2,}")


@dataclass(frozen=True)
class Likeness:
    """How much of our change (outside tests) a PR makes too: `lines`, the share of our changed
    lines it changes the same way; `names`, the share of identifiers on our added code lines
    that its added lines use; `removes_ours`, whether it removes every line we remove."""

    lines: float = 0.0
    names: float = 0.0
    removes_ours: bool = False

    def same_fix(self) -> bool:
        """Equal or containing ours: (nearly) all our lines, or the lines we remove and our
        code's names with half our lines (the same fix written differently)."""
        return self.lines >= SAME_FIX_SHARE or (
            self.names >= SAME_FIX_SHARE and (self.removes_ours or self.lines >= 0.5)
        )


def _names(texts: list[str]) -> set[str]:
    return {n for t in texts if not t.lstrip().startswith("#") for n in _NAME_RE.findall(t)}


def likeness(ours: FileChanges, theirs: FileChanges) -> Likeness:
    """How far the PR's change contains ours, file by file (see `Likeness`)."""
    paths = [p for p in ours if not _is_test(p)] or list(ours)
    total = matched = 0
    removes_ours, any_removed = True, False
    mine_names: set[str] = set()
    their_names: set[str] = set()
    for path in paths:
        their = theirs.get(path, [])
        added = {t for c in their for t in _texts(c.added)}
        removed = {t for c in their for t in _texts(c.removed)}
        their_names |= _names([t for c in their for t in c.added])
        for c in ours[path]:
            mine_names |= _names(c.added)
            for text in _texts(c.added):
                total, matched = total + 1, matched + (text in added)
            for text in _texts(c.removed):
                any_removed = True
                removes_ours &= text in removed
                total, matched = total + 1, matched + (text in removed)
    names = len(mine_names & their_names) / len(mine_names) if mine_names else 0.0
    return Likeness(matched / total if total else 0.0, names, removes_ours and any_removed)


SAME_FIX, CONFLICTS, NEARBY = "same-fix", "conflicts", "nearby"
VERDICT_RANK = {SAME_FIX: 0, CONFLICTS: 1, NEARBY: 2}


def verdict(ours: FileChanges, theirs: FileChanges, near: int = NEAR) -> tuple[str, Likeness]:
    """(verdict, likeness) of a PR against a patch, both at the pin; ("", _) when it changes
    nothing within `near` lines of ours."""
    closest = None
    for path, mine in ours.items():
        for a in mine:
            for b in theirs.get(path, []):
                d = _distance(a, b)
                closest = d if closest is None else min(closest, d)
    if closest is None or closest > near:
        return "", Likeness()
    like = likeness(ours, theirs)
    if like.same_fix():
        return SAME_FIX, like
    return (CONFLICTS if closest == 0 else NEARBY), like
