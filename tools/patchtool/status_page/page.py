"""Where the page lives and how it is produced from rows and measurements (no measuring here:
`commands/report.py` measures; `roll` regenerates the page into its commit)."""

from __future__ import annotations

from pathlib import Path

from ..model.manifest import load_manifest
from .live import Measurement, carried, previous
from .render import json_document, markdown
from .rows import PatchRow, series_rows

PAGE = Path("docs") / "patches.md"
DOCUMENT = Path("docs") / "patches.json"


def current_rows(root: Path) -> tuple[list[PatchRow], list[Measurement]]:
    """Every active patch and its measurement carried forward from the committed page."""
    manifest = load_manifest(root)
    rows = [r for up in manifest.upstreams.values() for r in series_rows(root, up)]
    old = previous(root / DOCUMENT)
    return rows, [carried(r, old) for r in rows]


def render(rows: list[PatchRow], live: list[Measurement], root: Path) -> dict[Path, str]:
    """The page's files; `root` for the upstream-test record the page also shows."""
    feeders = {up.name: up.feeder for up in load_manifest(root).upstreams.values() if up.feeder}
    return {PAGE: markdown(rows, live, root, feeders), DOCUMENT: json_document(rows, live)}


def stale(root: Path, texts: dict[Path, str]) -> list[Path]:
    """The page files whose committed text differs from `texts`."""
    out = []
    for path, text in texts.items():
        full = root / path
        if not full.is_file() or full.read_text(encoding="utf-8") != text:
            out.append(path)
    return out


def write(root: Path, texts: dict[Path, str]) -> list[str]:
    """Write the page; the paths written (relative to root)."""
    for path, text in texts.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return [p.as_posix() for p in texts]
