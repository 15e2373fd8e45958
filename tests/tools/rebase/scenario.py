"""Generated upstreams and series for the rebase tests: one file `MOD`, patches made on v1."""

from __future__ import annotations

from pathlib import Path

from tests.tools.repos import (
    make_patch,
    run,
    trailers,
)
from tools.patchtool.rebase.engine import rebase_series
from tools.patchtool.rebase.result import Base, RebaseResult
from tools.patchtool.rebase.scratch import create_scratch

MOD = "pkg/mod.py"


def fixed(lines: list[str], index: int, text: str) -> list[str]:
    out = list(lines)
    out[index] = text
    return out


def series_of(upstream: Path, *changes: tuple[str, list[str]]) -> list[tuple[str, bytes]]:
    """Patches made independently on v1 (each a one-file change to MOD unless given)."""
    out = []
    for number, (name, lines) in enumerate(changes, 1):
        data = make_patch(upstream, "v1", {MOD: lines}, f"fix {number}: {name}", trailers())
        out.append((f"{name}.patch", data))
    return out


def replay(
    tmp_path: Path, upstream: Path, patches: list[tuple[str, bytes]], new_rev: str, **kw: object
) -> RebaseResult:
    scratch = tmp_path / "scratch"
    create_scratch(scratch, [upstream])
    old_sha = run(["rev-parse", "v1"], upstream)
    new_sha = run(["rev-parse", new_rev], upstream)
    history = bool(kw.pop("history", True))
    old = Base("v1", old_sha, history, old_sha, "v1")
    new = Base(new_rev, new_sha, history, new_sha, new_rev)
    return rebase_series("Up", patches, old, new, scratch, history_repos=[upstream], **kw)  # type: ignore[arg-type]


def classes(result: RebaseResult) -> dict[str, str]:
    return {p.name: p.classification for p in result.patches}


def kinds(result: RebaseResult, name: str) -> list[str]:
    return [e.kind for p in result.patches if p.name == name for e in p.evidence]
