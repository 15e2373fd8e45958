"""What `apply` and `reset` share: their common arguments, the per-upstream loop and the report.

Every upstream gets an `Outcome`; a `PatchToolError` for one upstream becomes its `ERROR`
outcome and the others still run. The exit code: FAILED if any errored, else NOT_VERIFIED if a
series is not verified here (unless `--allow-missing`), else OK.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from .apply.apply import Outcome, State
from .command import root_of
from .errors import ExitCode, PatchToolError
from .model.manifest import Upstream, load_manifest


def configure_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("upstreams", nargs="*", metavar="UPSTREAM", help="default: all")
    parser.add_argument(
        "--force", action="store_true", help="stash uncommitted changes instead of refusing"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def each(args: argparse.Namespace, action: Callable[[Upstream], Outcome]) -> list[Outcome]:
    manifest = load_manifest(root_of(args))
    outcomes: list[Outcome] = []
    for up in manifest.select(args.upstreams):
        try:
            outcomes.append(action(up))
        except PatchToolError as exc:
            message = " ".join(str(exc).split())
            # The report prefixes every line with the upstream's name; do not say it twice.
            message = message.removeprefix(f"{up.name}: ")
            outcomes.append(Outcome(up.name, State.ERROR, message))
    return outcomes


def report(args: argparse.Namespace, outcomes: list[Outcome]) -> int:
    allow_missing = getattr(args, "allow_missing", False)
    failed = any(o.state == State.ERROR for o in outcomes)
    unverified = any(o.state == State.NOT_VERIFIED for o in outcomes)
    code = ExitCode.FAILED if failed else ExitCode.OK
    if not failed and unverified and not allow_missing:
        code = ExitCode.NOT_VERIFIED
    if args.json:
        rows = [o.as_dict() for o in outcomes]
        print(json.dumps({"ok": code == 0, "upstreams": rows}, indent=2))
        return code
    for o in outcomes:
        if o.state == State.ERROR:
            print(f"error: {o.name}: {o.message}", file=sys.stderr)
            continue
        stream = sys.stderr if o.state == State.NOT_VERIFIED else sys.stdout
        hint = (
            ""
            if allow_missing or o.state != State.NOT_VERIFIED
            else " (pass --allow-missing to accept)"
        )
        print(f"{o.name}: {o.message}{hint}", file=stream)
        for line in o.lines():
            print(f"  {o.name}: {line}", file=stream)
    return code
