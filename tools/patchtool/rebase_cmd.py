"""`rebase UPSTREAM --to REF`: classify the series on a new base; without conflicts, move to it.

Exit codes: 0 done (or dry run without conflicts), 2 conflict (scratch tree left with
markers, nothing else changed), 1 error.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import tempfile
from pathlib import Path

from .bases import AUTO, MODES, history_repos, resolve_bases, short
from .command import Command, root_of
from .errors import PatchToolError
from .manifest import Upstream, load_manifest
from .rebase import (
    RebaseResult,
    TripwireHook,
    create_scratch,
    rebase_series,
    remove_scratch,
    resume_series,
)
from .rebase_write import write_rebase
from .report import markdown, table
from .series import SERIES_FILE, read_series
from .sources import Downloader, pip_download
from .verify import tripwire_hook, venv_python

EXIT_CONFLICT = 2
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


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("upstream", metavar="UPSTREAM")
    parser.add_argument("--to", metavar="REF", help="tag or commit of the new base")
    parser.add_argument("--dry-run", action="store_true", help="classify only; change nothing")
    parser.add_argument("--json", action="store_true", help="machine-readable result")
    parser.add_argument(
        "--source",
        choices=MODES,
        default=AUTO,
        help="git history or release stand-ins (auto: git when both bases are reachable)",
    )
    parser.add_argument(
        "--commit", default="", help="upstream commit of REF when it cannot be read offline"
    )
    parser.add_argument("--scratch", type=Path, help="scratch directory (default: a new temp dir)")
    parser.add_argument("--keep-scratch", action="store_true", help="keep it even on success")
    parser.add_argument("--report", type=Path, help="write the Markdown report here")
    parser.add_argument(
        "--resume", type=Path, metavar="SCRATCH", help="continue after resolving a conflict by hand"
    )
    parser.add_argument(
        "--tripwires",
        action="store_true",
        help="also run each patch's Test: on the new base without it (upstreamed evidence; "
        "needs the project venv, one pytest process per patch)",
    )


def _run(args: argparse.Namespace) -> int:
    root = root_of(args)
    if not args.to and not args.resume:
        raise PatchToolError("rebase needs --to REF (or --resume SCRATCH after a conflict)")
    result, report, written = run_rebase(
        root,
        args.upstream,
        args.to or "",
        dry_run=args.dry_run,
        mode=args.source,
        new_commit=args.commit,
        scratch=args.scratch,
        keep_scratch=args.keep_scratch,
        report_path=args.report,
        resume=args.resume,
        tripwire=tripwire_hook(root, args.upstream, venv_python(root)) if args.tripwires else None,
        command=_command_line(args),
    )
    if args.json:
        payload = result.to_json()
        payload.update(report=str(report), written=written)
        print(json.dumps(payload, indent=2, sort_keys=True))
    else:
        print(table(result))
        print(f"report: {report}")
        if result.conflicts:
            print(f"conflict: nothing outside {result.scratch} changed. Finish by hand:")
            for cmd in result.finish_commands:
                print("  " + shlex.join(cmd))
        elif args.dry_run:
            print("dry run: nothing changed")
        else:
            print("written: " + ", ".join(written))
            up = load_manifest(root).select([args.upstream])[0]
            print(
                "next: git submodule update --checkout -- "
                f"{up.path} && tools/patches apply {up.name} && review, then commit "
                f"{up.path} {up.series_dir} patches/upstreams.toml {REPORT_DIR}"
            )
    return EXIT_CONFLICT if result.conflicts else 0


def _command_line(args: argparse.Namespace) -> list[str]:
    """The invocation as the report shows it (no temp paths, so reports are reproducible)."""
    cmd = ["tools/patches", "rebase", args.upstream]
    cmd += ["--to", args.to] if args.to else ["--resume", "SCRATCH"]
    cmd += ["--dry-run"] if args.dry_run else []
    cmd += ["--source", args.source] if args.source != AUTO else []
    cmd += ["--commit", args.commit] if args.commit else []
    cmd += ["--tripwires"] if args.tripwires else []
    return cmd


REBASE = Command(
    "rebase",
    "replay a series on a new upstream ref, classify each patch, move the pin",
    _configure,
    _run,
)
