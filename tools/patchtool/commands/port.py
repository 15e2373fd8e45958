"""`tools/patches port PATCH [--to REF] [--from-pin]` and `port --resume SCRATCH`: (re)generate
the patch's port onto the upstream's main, `patches/<Upstream>/main/<name>.patch`
(rebase/port.py), which `open-pr` opens there instead of the pin patch. Exit OK, CONFLICT with
the commands that finish it by hand, or an `error:` line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..command import Command, root_of
from ..errors import ExitCode, PatchToolError
from ..model.manifest import short
from ..model.ports import PORT_BASE
from ..rebase.port import CONFLICT, KEPT, NOT_NEEDED, PortResult, make_port, resume_port


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "patch", metavar="PATCH", nargs="?", help="the pin patch: patches/<Upstream>/<name>.patch"
    )
    parser.add_argument("--to", default=PORT_BASE, metavar="REF", help="default: %(default)s")
    parser.add_argument(
        "--from-pin",
        action="store_true",
        help="start again from the pin patch even where the existing port still applies "
        "(after a change to the pin patch's code)",
    )
    parser.add_argument("--scratch", type=Path, help="scratch directory (default: a new temp dir)")
    parser.add_argument(
        "--resume", type=Path, metavar="SCRATCH", help="write the port of a resolved conflict"
    )


def _say(result: PortResult) -> None:
    where = f"{result.ref} ({short(result.base)})"
    if result.outcome == NOT_NEEDED:
        gone = f"; removed {result.port}" if result.port else ""
        print(f"{result.patch}: not-needed: the pin patch applies on {where} as it is{gone}")
    elif result.outcome == CONFLICT:
        print(f"{result.patch}: conflict on {where} in {result.detail or 'the 3-way merge'}")
        print("finish by hand (keep the fix's intent: read the pin patch and its test):")
        for line in (
            f"cd {result.scratch}",
            "git diff",
            "git add -- <files> && git am --continue",
            f"tools/patches port --resume {result.scratch}",
        ):
            print("  " + line)
    else:
        print(f"{result.patch}: {result.outcome} on {where}: wrote {result.port}")
        if result.outcome == KEPT:
            print(
                "note: the port's own diff still applies and was kept; after a change to the "
                "pin patch's code run again with --from-pin"
            )


def _run(args: argparse.Namespace) -> int:
    root = root_of(args)
    if args.resume:
        result = resume_port(root, args.resume)
    elif args.patch:
        result = make_port(root, args.patch, args.to, args.scratch, args.from_pin)
    else:
        raise PatchToolError("port needs PATCH (or --resume SCRATCH after a conflict)")
    _say(result)
    return ExitCode.CONFLICT if result.outcome == CONFLICT else ExitCode.OK


PORT = Command(
    "port",
    "write a patch's port onto the upstream's main (open-pr opens it there)",
    _configure,
    _run,
)
