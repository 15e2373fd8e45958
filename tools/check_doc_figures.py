#!/usr/bin/env python3
"""Patch counts stated in README.md and the hand-written docs/*.md match patches/*/series.

    python3 tools/check_doc_figures.py      # check; one line per stale count, exit 1 if any

Why: a count written by hand is true the day it is written; each patch added or retired makes
it false without anyone touching the page (the README said 36 patches while the series had
40). Generated pages (docs/patches.md and the others in GENERATED) are checked by the command
that writes them. A hand-written page states the current series in one of these forms, which
this check reads (a wrapped line is read as one sentence):

    40 patches: Megatron-LM 14, Megatron-Bridge 21, NeMo-RL 5   (total, and each upstream named)
    14 Megatron-LM patches                                       (one upstream)
    the series has 40 patches / carries 40 patches / 40 patches carried

A past figure is written as "the 36-patch series" with its date (YYYY-MM-DD) in the same
paragraph, and is then left alone; undated, it is read as the current series. Fenced code
blocks (recorded output of a past day) are not read.
Standard library only (tools/ runs before any environment exists).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Pages written by a command; each is checked by that command (`--check`), not here.
GENERATED = {
    "docs/patches.md": "tools/patches report",
    "docs/models.md": "python -m model_matrix.matrix",
    "docs/layers.md": "python3 tools/check_layers.py --write-diagram",
}
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class Claim:
    """One stated count: where, what it counts (an upstream, or None for the whole series)."""

    path: str
    line: int
    text: str
    upstream: str | None
    stated: int


def series_counts(root: Path) -> dict[str, int]:
    """Patches per upstream, as `read_series` counts them: `#` comments and blank lines skipped."""
    counts: dict[str, int] = {}
    for series in sorted((root / "patches").glob("*/series")):
        lines = (raw.split("#", 1)[0].strip() for raw in series.read_text().splitlines())
        counts[series.parent.name] = sum(1 for text in lines if text)
    return counts


def pages(root: Path) -> list[Path]:
    """README.md and docs/*.md, less the generated pages."""
    found = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return [p for p in found if p.is_file() and p.relative_to(root).as_posix() not in GENERATED]


def paragraphs(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, stripped lines) of each paragraph outside fenced code blocks."""
    out: list[tuple[int, list[str]]] = []
    start, fenced = 0, False
    buf: list[str] = []
    for num, line in enumerate(text.splitlines(), start=1):
        fence = bool(FENCE.match(line))
        fenced ^= fence
        if fenced or fence or not line.strip():
            if buf:
                out.append((start, buf))
            buf = []
            continue
        if not buf:
            start = num
        buf.append(line.strip())
    if buf:
        out.append((start, buf))
    return out


def line_of(first: int, lines: list[str], offset: int) -> int:
    """Line number of `offset` in `" ".join(lines)`, the paragraph starting at line `first`."""
    end = 0
    for i, line in enumerate(lines):
        end += len(line) + 1
        if offset < end:
            return first + i
    return first + len(lines) - 1


def _patterns(upstreams: list[str]) -> dict[str, re.Pattern[str]]:
    """The phrasings of the module docstring, for these upstream names (the longest first, so
    no name matches as the prefix of another)."""
    name = "|".join(re.escape(u) for u in sorted(upstreams, key=len, reverse=True))
    item = rf"(?:{name}) \d+"
    sep = r"(?:, and |, | and )"
    return {
        "breakdown": re.compile(rf"\b(\d+) patches: ({item}(?:{sep}{item})*)"),
        "item": re.compile(rf"({name}) (\d+)"),
        "one": re.compile(rf"\b(\d+) ({name}) patches\b"),
        "total": re.compile(
            r"\b(?:series has|carries|carrying) (\d+) patches\b|\b(\d+) patches carried\b"
        ),
        "dated": re.compile(r"\bthe (\d+)-patch series\b"),
    }


def found_in(para: str, pat: dict[str, re.Pattern[str]]) -> list[tuple[int, str, str | None, int]]:
    """(offset, text, upstream or None for the whole series, count) of each count `para` states
    about the current series, in reading order."""
    out: list[tuple[int, str, str | None, int]] = []
    for m in pat["breakdown"].finditer(para):
        out.append((m.start(), m.group(0), None, int(m.group(1))))
        for item in pat["item"].finditer(m.group(2)):
            out.append((m.start(2) + item.start(), item.group(0), item.group(1), int(item[2])))
    for m in pat["one"].finditer(para):
        out.append((m.start(), m.group(0), m.group(2), int(m.group(1))))
    for m in pat["total"].finditer(para):
        out.append((m.start(), m.group(0), None, int(m.group(1) or m.group(2))))
    if not DATE.search(para):  # a dated "the N-patch series" is a past figure
        out += [(m.start(), m.group(0), None, int(m.group(1))) for m in pat["dated"].finditer(para)]
    return sorted(out, key=lambda found: found[0])


def claims(path: Path, root: Path, upstreams: list[str]) -> list[Claim]:
    """Every count `path` states about the current series."""
    rel = path.relative_to(root).as_posix()
    pat = _patterns(upstreams)
    return [
        Claim(rel, line_of(first, lines, offset), text, upstream, stated)
        for first, lines in paragraphs(path.read_text())
        for offset, text, upstream, stated in found_in(" ".join(lines), pat)
    ]


def stale(root: Path) -> list[str]:
    """One actionable line per stated count that differs from the series."""
    counts = series_counts(root)
    total = sum(counts.values())
    out = []
    for page in pages(root):
        for c in claims(page, root, list(counts)):
            actual = counts[c.upstream] if c.upstream else total
            if c.stated != actual:
                where = f"patches/{c.upstream}/series" if c.upstream else "patches/*/series"
                out.append(
                    f"{c.path}:{c.line}: '{c.text}' states {c.stated}, {where} has {actual}: "
                    f"write {actual} (a past figure: 'the N-patch series' with its date)"
                )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    problems = stale(ROOT)
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
