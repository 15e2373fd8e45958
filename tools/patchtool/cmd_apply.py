"""CLI glue of `apply` and `reset`: per-upstream outcomes, exit codes, `--json`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from .apply import Outcome, apply_upstream, reset_upstream
from .command import Command, root_of
from .errors import PatchToolError
from .manifest import Upstream, load_manifest

EXIT_NOT_VERIFIED = 3


def _configure_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("upstreams", nargs="*", metavar="UPSTREAM", help="default: all")
    parser.add_argument(
        "--force", action="store_true", help="stash uncommitted changes instead of refusing"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _configure_apply(parser: argparse.ArgumentParser) -> None:
    _configure_common(parser)
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="exit 0 even if an upstream is missing (its series is reported NOT verified)",
    )


def _each(args: argparse.Namespace, action: Callable[[Upstream], Outcome]) -> list[Outcome]:
    manifest = load_manifest(root_of(args))
    outcomes: list[Outcome] = []
    for up in manifest.select(args.upstreams):
        try:
            outcomes.append(action(up))
        except PatchToolError as exc:
            message = " ".join(str(exc).split())
            # The report prefixes every line with the upstream's name; do not say it twice.
            message = message.removeprefix(f"{up.name}: ")
            outcomes.append(Outcome(up.name, "error", message))
    return outcomes


def _report(args: argparse.Namespace, outcomes: list[Outcome]) -> int:
    allow_missing = getattr(args, "allow_missing", False)
    failed = any(o.state == "error" for o in outcomes)
    unverified = any(o.state == "not-verified" for o in outcomes)
    code = 1 if failed else (EXIT_NOT_VERIFIED if unverified and not allow_missing else 0)
    if args.json:
        rows = [o.as_dict() for o in outcomes]
        print(json.dumps({"ok": code == 0, "upstreams": rows}, indent=2))
        return code
    for o in outcomes:
        if o.state == "error":
            print(f"error: {o.name}: {o.message}", file=sys.stderr)
            continue
        stream = sys.stderr if o.state == "not-verified" else sys.stdout
        hint = (
            ""
            if allow_missing or o.state != "not-verified"
            else " (pass --allow-missing to accept)"
        )
        print(f"{o.name}: {o.message}{hint}", file=stream)
        for line in o.lines():
            print(f"  {o.name}: {line}", file=stream)
    return code


def _run_apply(args: argparse.Namespace) -> int:
    root = root_of(args)
    return _report(args, _each(args, lambda up: apply_upstream(root, up, force=args.force)))


def _run_reset(args: argparse.Namespace) -> int:
    root = root_of(args)
    return _report(args, _each(args, lambda up: reset_upstream(root, up, force=args.force)))


APPLY = Command(
    "apply",
    "check out each pin and apply its series on branch `patched` (strict, atomic, idempotent)",
    _configure_apply,
    _run_apply,
)
RESET = Command("reset", "check out each pinned commit (detached)", _configure_common, _run_reset)
