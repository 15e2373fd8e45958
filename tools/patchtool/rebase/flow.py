"""The flow of `rebase` (and the tail `pin` shares): scratch, bases, replay, report, write.

`run_rebase` is the whole rebase as a function; `finish` is what every replayed series ends
with: the Markdown report, and, unless held back (a conflict or a dry run), the new series and
pin written into the superproject. A conflict leaves the scratch tree with its markers and
changes nothing else (the command exits ExitCode.CONFLICT).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import git_ok
from ..model.manifest import Upstream, load_manifest, short
from ..model.series import SERIES_FILE, read_series
from ..source.standin import Downloader, pip_download
from .bases import AUTO, history_repos, resolve_bases
from .engine import STATE_FILE, TripwireHook, rebase_series, resume_series
from .report import markdown
from .result import Base, RebaseResult
from .scratch import create_scratch, remove_scratch
from .write import StandinMove, write_rebase

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
    allow_backwards: bool = False,
) -> tuple[RebaseResult, Path, list[str]]:
    """The whole `rebase` command as a function: (result, report path, files written)."""
    up = load_manifest(root).select([name])[0]
    source_note = ""
    if resume is not None and dry_run:
        # The scratch tree holds the person's resolution: a dry run replays on a copy and
        # leaves the original (state file, HEAD, report) byte for byte as it was.
        cmd = command or ["tools/patches", "rebase", up.name, "--resume", "SCRATCH", "--dry-run"]
        result, path = _dry_resume(resume.resolve(), tripwire, cmd, report_path)
        return result, path, []
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
            backwards = _check_direction(scratch, up, ref, old, new, dry_run or allow_backwards)
            result = rebase_series(
                up.name, read_patches(root, up), old, new, scratch,
                history_repos=repos, tripwire=tripwire,
            )  # fmt: skip
            result.backwards = backwards
        except BaseException:
            if not keep_scratch:
                remove_scratch(scratch)
            raise
    cmd = command or ["tools/patches", "rebase", up.name, "--to", ref]
    path, written = finish(
        root, up, result, scratch, markdown(result, cmd, source_note),
        hold=bool(result.conflicts) or dry_run,
        new_commit=result.new.upstream_commit or new_commit,
        new_tag=result.new.tag,
        report_path=report_path,
        keep_scratch=keep_scratch,
    )  # fmt: skip
    return result, path, written


def _check_direction(
    scratch: Path, up: Upstream, ref: str, old: Base, new: Base, allowed: bool
) -> bool:
    """Whether the rebase moves the pin backwards; refused unless `allowed`."""
    backwards = moves_backwards(scratch, old, new)
    if backwards and not allowed:
        raise PatchToolError(
            f"{up.name}: {ref} ({short(new.commit)}) is an ancestor of the current pin "
            f"{old.label}: this rebase moves the pin backwards; nothing was changed. "
            "If that is what you want, run it again with --allow-backwards"
        )
    return backwards


def moves_backwards(scratch: Path, old: Base, new: Base) -> bool:
    """True when the new base is a strict ancestor of the old pin (git history only)."""
    if not (old.history and new.history) or old.commit == new.commit:
        return False
    return git_ok(["merge-base", "--is-ancestor", new.commit, old.commit], scratch)


def _dry_resume(
    scratch: Path, tripwire: TripwireHook | None, command: list[str], report_path: Path | None
) -> tuple[RebaseResult, Path]:
    """`--resume SCRATCH --dry-run`: classify on a throw-away copy of SCRATCH.

    The report goes next to the copy (a new temp directory) unless `report_path` is given;
    the copy is removed, SCRATCH is never written.
    """
    if not (scratch / ".git" / STATE_FILE).is_file():
        resume_series(scratch, tripwire=tripwire)  # raises the actionable "no rebase here"
    work = Path(tempfile.mkdtemp(prefix="patches-rebase-dry-resume-"))
    copy = work / scratch.name
    try:
        shutil.copytree(scratch, copy, symlinks=True)
        result = resume_series(copy, tripwire=tripwire)
        result.scratch = str(scratch)
        result.finish_commands = []  # nothing was left in SCRATCH to finish
        path = report_path or work / f"{scratch.name}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(markdown(result, command, ""), encoding="utf-8")
    finally:
        remove_scratch(copy)
    return result, path


def finish(
    root: Path,
    up: Upstream,
    result: RebaseResult,
    scratch: Path,
    text: str,
    *,
    hold: bool,
    new_commit: str,
    new_tag: str,
    report_path: Path | None = None,
    keep_scratch: bool = False,
    standin: StandinMove | None = None,
) -> tuple[Path, list[str]]:
    """Write the report `text`; unless `hold`, write the new series and pin (with `standin`).

    Held back, the report goes next to the scratch directory (`<scratch>.md`); else to
    docs/rebases/ and the files written are returned (report last). The scratch directory is
    removed unless `result` conflicts or `keep_scratch`. Returns (report path, files written).
    """
    written: list[str] = []
    if hold:
        path = report_path or scratch.parent / f"{scratch.name}.md"
    else:
        path = report_path or root / REPORT_DIR / report_name(up, result)
        written = write_rebase(
            root, up, result, new_commit=new_commit, new_tag=new_tag, standin=standin
        ).files
        written.append(
            path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if not result.conflicts and not keep_scratch:
        remove_scratch(scratch)
    return path, written
