"""Series files and patch mboxes, parsed into plain data with line numbers.

Everything downstream (lint, apply, rebase, export, verify) works from these dataclasses,
so error messages can point at `file:line` and pre-image blobs can be checked without git.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from email.header import decode_header, make_header
from pathlib import Path

from ..errors import PatchToolError

SERIES_FILE = "series"
RETIRED_DIR = "upstreamed"
NULL_BLOB_RE = re.compile(r"^0+$")

_MBOX_FROM_RE = re.compile(r"^From [0-9a-f]{40,64} Mon Sep 17 00:00:00 2001$")
_TRAILER_RE = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):[ \t]*(.*)$")
_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_INDEX_RE = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)(?: ([0-7]{6}))?$")


@dataclass(frozen=True)
class SeriesEntry:
    """One patch name in a series file and the line it sits on (1-based)."""

    name: str
    line: int


@dataclass(frozen=True)
class Trailer:
    key: str
    value: str
    line: int


@dataclass
class Hunk:
    """One `@@ -a,b +c,d @@` hunk; `added` holds (patch line, text) of its `+` lines, `old` the
    text of its old side in order (context and `-` lines: what it needs in the file)."""

    old_start: int
    old_count: int
    new_start: int
    new_count: int
    header: str
    line: int
    added: list[tuple[int, str]] = field(default_factory=list)
    old: list[str] = field(default_factory=list)

    @property
    def range_text(self) -> str:
        return f"@@ -{self.old_start},{self.old_count} +{self.new_start},{self.new_count} @@"


@dataclass
class FileDiff:
    """The diff of one file: paths (None for /dev/null), blob ids, modes, hunks."""

    old_path: str | None
    new_path: str | None
    line: int
    old_blob: str = ""
    new_blob: str = ""
    old_mode: str = ""
    new_mode: str = ""
    binary: bool = False
    created: bool = False
    deleted: bool = False
    hunks: list[Hunk] = field(default_factory=list)
    # (patch line, path) of every path the diff header names (prefix stripped), for path checks.
    path_refs: list[tuple[int, str]] = field(default_factory=list)

    @property
    def path(self) -> str:
        """The path this diff is about (new path unless the file is deleted)."""
        return self.new_path or self.old_path or ""

    @property
    def is_new(self) -> bool:
        return self.created or self.old_path is None or bool(NULL_BLOB_RE.match(self.old_blob))

    @property
    def is_deleted(self) -> bool:
        return self.deleted or self.new_path is None or bool(NULL_BLOB_RE.match(self.new_blob))


@dataclass
class Patch:
    """One format-patch mbox: header fields, message, trailers and file diffs."""

    path: Path
    author_name: str = ""
    author_email: str = ""
    date: str = ""
    subject: str = ""
    subject_line: int = 0
    body: list[tuple[int, str]] = field(default_factory=list)
    trailers: list[Trailer] = field(default_factory=list)
    files: list[FileDiff] = field(default_factory=list)
    # Problems found while parsing; lint reports them, apply refuses on them.
    problems: list[tuple[int, str]] = field(default_factory=list)
    mbox_count: int = 0
    # Line of the first file diff in quilt's format (`quilt refresh`: `Index:`/`===`, plain
    # `---`/`+++`, no `diff --git`/`index`), 0 when none. Read and applied as is (git am takes
    # it); lint asks for the canonical bytes back, which `export` writes.
    quilt_line: int = 0

    def trailer_values(self, key: str) -> list[str]:
        return [t.value for t in self.trailers if t.key.lower() == key.lower()]


def read_series(series_path: Path) -> list[SeriesEntry]:
    """Patch names of a series file in apply order; `#` comments and blank lines skipped."""
    if not series_path.exists():
        raise PatchToolError(f"{series_path}: series file missing; create it (may be empty)")
    entries: list[SeriesEntry] = []
    for number, raw in enumerate(series_path.read_text(encoding="utf-8").splitlines(), 1):
        text = raw.split("#", 1)[0].strip()
        if text:
            entries.append(SeriesEntry(text, number))
    return entries


def unquote_path(text: str) -> str:
    """Undo git's C-style quoting of a path (`"a\\tb"`), as core.quotePath=true prints it."""
    if not (len(text) >= 2 and text[0] == '"' and text[-1] == '"'):
        return text
    body = text[1:-1]
    out = bytearray()
    escapes = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in escapes:
                out.append(escapes[nxt])
                i += 2
                continue
            if nxt in "0123":
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
        out += ch.encode("utf-8", errors="surrogateescape")
        i += 1
    return out.decode("utf-8", errors="surrogateescape")


def _strip_prefix(raw: str, prefix: str) -> str | None:
    """`a/x` -> `x` for ---/+++ lines; `/dev/null` -> None."""
    path = unquote_path(raw.split("\t", 1)[0])
    if path == "/dev/null":
        return None
    return path[len(prefix) :] if path.startswith(prefix) else path


def _strip_component(raw: str) -> str | None:
    """`up.orig/pkg/x.py` -> `pkg/x.py` (git apply's -p1) for a diff without `diff --git`."""
    path = unquote_path(raw.split("\t", 1)[0])
    if path == "/dev/null":
        return None
    return path.split("/", 1)[1] if "/" in path else path


def _decode_header(value: str) -> str:
    return str(make_header(decode_header(value)))


def _parse_headers(patch: Patch, lines: list[str], start: int) -> int:
    """Parse the RFC 822 header block from `start`; return the index after its blank line."""
    i = start
    headers: list[tuple[int, str, str]] = []
    while i < len(lines) and lines[i] != "":
        line = lines[i]
        if line[:1] in (" ", "\t") and headers:
            num, key, value = headers[-1]
            headers[-1] = (num, key, value + " " + line.strip())
        elif ":" in line:
            key, value = line.split(":", 1)
            headers.append((i + 1, key.strip().lower(), value.strip()))
        i += 1
    for num, key, value in headers:
        if key == "from":
            decoded = _decode_header(value)
            match = re.match(r"^(.*?)\s*<([^>]*)>$", decoded)
            patch.author_name = (match.group(1) if match else decoded).strip().strip('"')
            patch.author_email = match.group(2) if match else ""
        elif key == "date":
            patch.date = value
        elif key == "subject":
            patch.subject = _decode_header(value)
            patch.subject_line = num
    return i + 1


def _diff_starts(lines: list[str], i: int) -> bool:
    """A file diff starts at line `i`: `diff --git`, or quilt's `Index:` + `===` or `---` + `+++`."""
    line, nxt = lines[i], lines[i + 1] if i + 1 < len(lines) else ""
    return (
        line.startswith("diff --git ")
        or (line.startswith("Index: ") and nxt.startswith("====="))
        or (line.startswith("--- ") and nxt.startswith("+++ "))
    )


def _parse_message(patch: Patch, lines: list[str], start: int) -> int:
    """Body up to the `---` separator (or the first diff); trailers = its last paragraph."""
    i = start
    body: list[tuple[int, str]] = []
    while i < len(lines) and lines[i] != "---" and not _diff_starts(lines, i):
        body.append((i + 1, lines[i]))
        i += 1
    while body and not body[-1][1].strip():
        body.pop()
    patch.body = body
    block: list[tuple[int, str]] = []
    for num, text in reversed(body):
        if not text.strip():
            break
        block.append((num, text))
    block.reverse()
    parsed = [(num, _TRAILER_RE.match(text)) for num, text in block]
    if block and all(m is not None for _, m in parsed):
        patch.trailers = [Trailer(m.group(1), m.group(2).strip(), num) for num, m in parsed if m]
    return i


def _parse_diffs(patch: Patch, lines: list[str], start: int) -> None:
    current: FileDiff | None = None
    hunk: Hunk | None = None
    old_left = new_left = 0
    for i in range(start, len(lines)):
        line, num = lines[i], i + 1
        if hunk is not None and (old_left > 0 or new_left > 0):
            tag = line[:1]
            if tag == "+":
                hunk.added.append((num, line[1:]))
                new_left -= 1
            elif tag == "-":
                hunk.old.append(line[1:])
                old_left -= 1
            elif tag in (" ", ""):
                hunk.old.append(line[1:])
                old_left -= 1
                new_left -= 1
            elif tag != "\\":
                patch.problems.append((num, f"hunk {hunk.range_text} ends early"))
                hunk = None
            continue
        if line.startswith("diff --git "):
            current = FileDiff(old_path=None, new_path=None, line=num)
            patch.files.append(current)
            hunk = None
            continue
        if (
            (current is None or current.hunks)
            and line.startswith("--- ")
            and i + 1 < len(lines)
            and lines[i + 1].startswith("+++ ")
        ):
            # A diff without `diff --git` (quilt refresh, plain diff -u): paths are -p1 ones.
            current, hunk = _start_quilt_file(patch, line, num), None
            continue
        if (
            current is not None
            and patch.quilt_line
            and not current.hunks
            and line.startswith("+++ ")
        ):
            current.new_path = _strip_component(line[4:])
            if current.new_path is not None:
                current.path_refs.append((num, current.new_path))
            continue
        if current is None:
            continue
        match = _HUNK_RE.match(line)
        if match:
            old_count = int(match.group(2)) if match.group(2) is not None else 1
            new_count = int(match.group(4)) if match.group(4) is not None else 1
            hunk = Hunk(int(match.group(1)), old_count, int(match.group(3)), new_count, line, num)
            current.hunks.append(hunk)
            old_left, new_left = old_count, new_count
        elif not _file_header(current, line, num):
            current = None
    _paths_from_diff_git(patch, lines)


def _start_quilt_file(patch: Patch, line: str, num: int) -> FileDiff:
    """A file's diff that starts at its `--- ` line (no `diff --git`): -p1 paths."""
    current = FileDiff(old_path=None, new_path=None, line=num)
    patch.files.append(current)
    patch.quilt_line = patch.quilt_line or num
    current.old_path = _strip_component(line[4:])
    if current.old_path is not None:
        current.path_refs.append((num, current.old_path))
    return current


def _file_header(current: FileDiff, line: str, num: int) -> bool:
    """Record one extended-header line of a file's diff; False where the patch's diffs end
    (`-- ` signature, next mbox message)."""
    if line.startswith("index "):
        idx = _INDEX_RE.match(line)
        if idx:
            current.old_blob, current.new_blob = idx.group(1), idx.group(2)
            if idx.group(3):
                current.old_mode = current.new_mode = idx.group(3)
    elif line.startswith("--- "):
        current.old_path = _strip_prefix(line[4:], "a/")
        if current.old_path is not None:
            current.path_refs.append((num, current.old_path))
    elif line.startswith("+++ "):
        current.new_path = _strip_prefix(line[4:], "b/")
        if current.new_path is not None:
            current.path_refs.append((num, current.new_path))
    elif line.startswith(("rename from ", "copy from ")):
        current.old_path = unquote_path(line.split(" ", 2)[2])
        current.path_refs.append((num, current.old_path))
    elif line.startswith(("rename to ", "copy to ")):
        current.new_path = unquote_path(line.split(" ", 2)[2])
        current.path_refs.append((num, current.new_path))
    elif line.startswith(("old mode ", "deleted file mode ")):
        current.old_mode = line.rsplit(" ", 1)[1]
        current.deleted = line.startswith("deleted")
    elif line.startswith(("new mode ", "new file mode ")):
        current.new_mode = line.rsplit(" ", 1)[1]
        current.created = line.startswith("new file")
    elif line.startswith(("GIT binary patch", "Binary files ")):
        current.binary = True
    elif line == "-- " or line.startswith("From "):
        return False
    return True


def _paths_from_diff_git(patch: Patch, lines: list[str]) -> None:
    """Fill paths of header-only diffs (mode change, empty new file) from `diff --git a/x b/x`."""
    for diff in patch.files:
        if diff.old_path is not None or diff.new_path is not None:
            continue
        rest = lines[diff.line - 1][len("diff --git ") :]
        half = len(rest) // 2
        a_part, b_part = rest[:half], rest[half + 1 :]
        old, new = _strip_prefix(a_part, "a/"), _strip_prefix(b_part, "b/")
        diff.path_refs += [(diff.line, p) for p in (old, new) if p is not None]
        diff.old_path = None if diff.created else old
        diff.new_path = None if diff.deleted else new


def parse_patch_text(text: str, path: Path) -> Patch:
    """Parse one git format-patch mbox (as produced by `git.format_patch`)."""
    patch = Patch(path=path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    starts = [i for i, line in enumerate(lines) if _MBOX_FROM_RE.match(line)]
    patch.mbox_count = len(starts)
    if not starts:
        patch.problems.append((1, "not a git format-patch mbox (no 'From <sha> Mon Sep 17' line)"))
        return patch
    if len(starts) > 1:
        patch.problems.append(
            (starts[1] + 1, "more than one commit in this file: one fix per patch")
        )
    end = starts[1] if len(starts) > 1 else len(lines)
    lines = lines[:end]
    i = _parse_headers(patch, lines, starts[0] + 1)
    i = _parse_message(patch, lines, i)
    _parse_diffs(patch, lines, i)
    if not patch.subject:
        patch.problems.append((starts[0] + 1, "no Subject: header"))
    if not patch.files:
        patch.problems.append((max(i, 1), "no 'diff --git' in patch"))
    return patch


def parse_patch(path: Path) -> Patch:
    """Parse a patch file; raise PatchToolError if it cannot be read."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PatchToolError(f"{path}: cannot read patch: {exc.strerror}") from exc
    return parse_patch_text(data.decode("utf-8", errors="surrogateescape"), path)


def load_series(series_dir: Path) -> list[tuple[SeriesEntry, Patch]]:
    """Series entries with their parsed patches; raise naming the series line if one is missing."""
    pairs: list[tuple[SeriesEntry, Patch]] = []
    series_path = series_dir / SERIES_FILE
    for entry in read_series(series_path):
        patch_path = series_dir / entry.name
        if not patch_path.is_file():
            raise PatchToolError(
                f"{series_path}:{entry.line}: {entry.name} listed but not found; "
                "add the file or remove the line"
            )
        pairs.append((entry, parse_patch(patch_path)))
    return pairs


# A loaded series: each `series` line with its parsed patch, in order.
Series = list[tuple[SeriesEntry, Patch]]


_DEPENDS_RE = re.compile(r"^(?P<upstream>[A-Za-z0-9._-]+)/(?P<patch>[^/\s]+\.patch)$")


def parse_depends(value: str) -> tuple[str, str] | None:
    """A `Depends-On:` value, `Megatron-LM/x.patch` -> ("Megatron-LM", "x.patch"); None when
    malformed. Here, beside the patch model, because verify and the PR tools both read it."""
    match = _DEPENDS_RE.match(value.strip())
    return (match.group("upstream"), match.group("patch")) if match else None
