"""`tools/patches apply`: check out each pin and apply its series on branch `patched`, then
link each checkout's nested `[tool.uv.sources]` paths to our checkouts (source/nested_wiring.py)."""

from __future__ import annotations

import argparse

from ..apply.apply import Outcome, apply_upstream, wire_after_apply
from ..command import Command, root_of
from ..model.manifest import Upstream, load_manifest
from ..outcomes import configure_common, each, report
from ..source.nested_wiring import refuse_blocked


def _configure_apply(parser: argparse.ArgumentParser) -> None:
    configure_common(parser)
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="exit 0 even if an upstream is missing (its series is reported NOT verified)",
    )


def _run_apply(args: argparse.Namespace) -> int:
    root = root_of(args)
    manifest = load_manifest(root)

    def apply_one(up: Upstream) -> Outcome:
        refuse_blocked(root, manifest, up)  # a nested checkout of the user's: before anything
        return apply_upstream(root, up, force=args.force)

    outcomes = each(args, apply_one)
    # After every upstream is in place: a nested link points from one checkout into another.
    return report(args, [wire_after_apply(root, manifest, o) for o in outcomes])


APPLY = Command(
    "apply",
    "check out each pin and apply its series on branch `patched` (strict, atomic, idempotent)",
    _configure_apply,
    _run_apply,
)
