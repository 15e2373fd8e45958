"""`rebase UPSTREAM --to REF`: classify the series on a new base; without conflicts, move to it.

Exit codes: 0 done (or dry run without conflicts), 2 conflict (scratch tree left with
markers, nothing else changed), 1 error.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from ..core.manifest import Upstream, load_manifest, short
from ..core.series import SERIES_FILE, read_series
from ..rebase.bases import AUTO, history_repos, resolve_bases
from ..rebase.engine import (
    RebaseResult,
    TripwireHook,
    create_scratch,
    rebase_series,
    remove_scratch,
    resume_series,
)
from ..rebase.report import markdown
from ..rebase.write import write_rebase
from ..source.standin import Downloader, pip_download

REPORT_DIR = Path("docs") / "rebases"


def report_name(up: Upstream, result: RebaseResult) -> str:
    old = result.old.tag or short(result.old.upstream_commit) or "old"
    new = result.new.tag or short(result.new.upstream_commit) or "new"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{up.name}-{old}-to-{new}") + ".md"


def read_patches(root: Path, up: Upstream) -> list[tuple[str, bytes]]:
    series_dir = root / up.series_dir
    return [
        (entry.name, (series_dir / entry.name).read_bytes())
        for entry in read_series(series_dir / SERIES_FILE)
    ]


def run_rebase(
    root: Path,
    name: str,
    ref: str,
    *,
    dry_run: bool = False,
    mode: str = AUTO,
    new_commit: str = "",
    scratch: Path | None = None,
    keep_scratch: bool = False,
    report_path: Path | None = None,
    resume: Path | None = None,
    tripwire: TripwireHook | None = None,
    downloader: Downloader = pip_download,
    command: list[str] | None = None,
) -> tuple[RebaseResult, Path, list[str]]:
    """The whole `rebase` command as a function: (result, report path, files written)."""
    up = load_manifest(root).select([name])[0]
    source_note = ""
    if resume is not None:
        scratch = resume.resolve()
        result = resume_series(scratch, tripwire=tripwire)
    else:
        if scratch is None:
            scratch = Path(tempfile.mkdtemp(prefix=f"patches-rebase-{up.name}-"))
        scratch = scratch.resolve()
        create_scratch(scratch, history_repos(root, up))
        try:
            old, new, repos, source_note = resolve_bases(
                scratch, root, up, ref, mode=mode, new_commit=new_commit, downloader=downloader
            )
            result = rebase_series(
                up.name, read_patches(root, up), old, new, scratch,
                history_repos=repos, tripwire=tripwire,
            )  # fmt: skip
        except BaseException:
            if not keep_scratch:
                remove_scratch(scratch)
            raise
    cmd = command or ["tools/patches", "rebase", up.name, "--to", ref]
    text = markdown(result, cmd, source_note)
    written: list[str] = []
    if result.conflicts or dry_run:
        path = report_path or scratch.parent / f"{scratch.name}.md"
    else:
        path = report_path or root / REPORT_DIR / report_name(up, result)
        tag = result.new.tag
        sha = result.new.upstream_commit or new_commit
        written = write_rebase(root, up, result, new_commit=sha, new_tag=tag).files
        written.append(
            path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if not result.conflicts and not keep_scratch:
        remove_scratch(scratch)
    return result, path, written
