"""`tools/patches pin UPSTREAM REF | --follow UPSTREAM [REF]`: move pins with the rebase
machinery (rebase/pin.py). Prints each move and its classification table; after writing, the
incoherences `check-pins` would report. Exit CONFLICT when a patch conflicts (nothing written).
"""

from __future__ import annotations

import argparse
import json
import shlex

from ..command import Command, root_of
from ..errors import ExitCode, PatchToolError
from ..model.manifest import (
    short,
)
from ..rebase.pin import parse_proxies, run_pin
from ..rebase.report import table
from ..source.pin_check import (
    AHEAD,
    BEHIND,
    DIVERGED,
    UNKNOWN,
    VIOLATED,
    check_pins,
    exit_code,
)


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("upstream", metavar="UPSTREAM")
    parser.add_argument("ref", nargs="?", default="", metavar="REF", help="default: current pin")
    parser.add_argument(
        "--follow",
        action="store_true",
        help="also pin the upstreams UPSTREAM@REF nests (Bridge, then its Megatron-LM)",
    )
    parser.add_argument("--dry-run", action="store_true", help="classify only; change nothing")
    parser.add_argument(
        "--proxy",
        action="append",
        default=[],
        metavar="[NAME=]X.Y.Z[,X.Y.Z]",
        help="candidate releases for a non-release pin's proxy, measured against their archives "
        "(default: the release tags in the history); bare versions apply to UPSTREAM",
    )
    parser.add_argument("--json", action="store_true")


def _run(args: argparse.Namespace) -> int:
    root = root_of(args)
    if not args.follow and not args.ref:
        raise PatchToolError("pin UPSTREAM REF needs a REF (or --follow)")
    planned, written = run_pin(
        root,
        args.upstream,
        args.ref,
        follow=args.follow,
        dry_run=args.dry_run,
        proxies=parse_proxies(args.proxy, args.upstream),
    )
    conflict = any(p.result is not None and p.result.conflicts for p in planned)
    if args.json:
        rows = [
            {
                "upstream": p.move.upstream.name,
                "commit": p.move.commit,
                "reason": p.move.reason,
                "result": p.result.to_json() if p.result else None,
                "standin": p.standin.__dict__ if p.standin else None,
            }
            for p in planned
        ]
        print(json.dumps({"moves": rows, "written": written, "conflict": conflict}, indent=2))
        return ExitCode.CONFLICT if conflict else ExitCode.OK
    for p in planned:
        name = p.move.upstream.name
        if p.result is None:
            print(f"{name}: already at {short(p.move.commit)} ({p.move.reason})")
            if p.standin is not None:
                print(f"{name} offline stand-in: {p.standin.text(p.move.upstream)}")
            continue
        print(f"{name} -> {short(p.move.commit)} ({p.move.reason})")
        print(table(p.result))
        if p.standin is not None:
            print(f"{name} offline stand-in: {p.standin.text(p.move.upstream)}")
        for cmd in p.result.finish_commands:
            print("  " + shlex.join(cmd))
    if conflict:
        print("conflict: nothing outside the scratch directories changed")
        return ExitCode.CONFLICT
    if args.dry_run:
        print("dry run: nothing changed")
        return 0
    print("written: " + (", ".join(written) or "nothing"))
    relations = check_pins(root)
    for r in relations:
        if r.state in (AHEAD, BEHIND, DIVERGED, VIOLATED):
            print(f"incoherent: {r.holder}@{r.holder_pin} -> {r.target}: {r.state} ({r.detail})")
        elif r.state == UNKNOWN:
            print(f"unknown: {r.holder}@{r.holder_pin} -> {r.target}: {r.detail}")
    # The same verdict `check-pins` gives: unknown is never called coherent.
    verdict = {
        ExitCode.OK: "coherent",
        ExitCode.FAILED: "INCOHERENT",
        ExitCode.NOT_VERIFIED: "coherence partly unknown",
    }
    print(f"check-pins: {verdict[exit_code(relations)]}")
    return 0


PIN = Command(
    "pin", "move a pin (or follow NeMo-RL's chain) with the rebase machinery", _configure, _run
)
