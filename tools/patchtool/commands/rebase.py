"""`tools/patches rebase UPSTREAM --to REF | --resume SCRATCH`: replay the series on a new
base (rebase/flow.py), print the classification table and the report path, and the next steps.
Exit CONFLICT when a patch conflicts (nothing outside the scratch directory changed), else OK.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from ..command import Command, root_of
from ..errors import ExitCode, PatchToolError
from ..model.manifest import load_manifest
from ..rebase.bases import AUTO, MODES, describe
from ..rebase.flow import REPORT_DIR, run_rebase
from ..rebase.report import table
from ..verify.pytest_run import venv_python
from ..verify.tripwire import tripwire_hook


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
        "--allow-backwards",
        action="store_true",
        help="allow a new base that is an ancestor of the current pin (an older release)",
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
        allow_backwards=args.allow_backwards,
    )
    if args.json:
        payload = result.to_json()
        payload.update(report=str(report), written=written)
        print(json.dumps(payload, indent=2, sort_keys=True))
    else:
        if args.to and result.new.history:
            print("resolved: " + describe(result.new, args.to))
        if result.backwards:
            print(f"note: {result.new.label} is older than the pin: this moves the pin backwards")
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
    return ExitCode.CONFLICT if result.conflicts else ExitCode.OK


def _command_line(args: argparse.Namespace) -> list[str]:
    """The invocation as the report shows it (no temp paths, so reports are reproducible)."""
    cmd = ["tools/patches", "rebase", args.upstream]
    cmd += ["--to", args.to] if args.to else ["--resume", "SCRATCH"]
    cmd += ["--dry-run"] if args.dry_run else []
    cmd += ["--source", args.source] if args.source != AUTO else []
    cmd += ["--commit", args.commit] if args.commit else []
    cmd += ["--tripwires"] if args.tripwires else []
    cmd += ["--allow-backwards"] if args.allow_backwards else []
    return cmd


REBASE = Command(
    "rebase",
    "replay a series on a new upstream ref, classify each patch, move the pin",
    _configure,
    _run,
)
