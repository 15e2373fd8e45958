"""`tools/patches reset`: check out each pinned commit (detached) and remove the nested links
apply made (source/nested_wiring.py)."""

from __future__ import annotations

import argparse

from ..apply.apply import reset_upstream, unwire_after_reset
from ..command import Command, root_of
from ..model.manifest import load_manifest
from ..outcomes import configure_common, each, report


def _run_reset(args: argparse.Namespace) -> int:
    root = root_of(args)
    manifest = load_manifest(root)
    outcomes = each(args, lambda up: reset_upstream(root, up, force=args.force))
    return report(args, [unwire_after_reset(root, manifest, o) for o in outcomes])


RESET = Command(
    "reset",
    "check out each pinned commit (detached) and remove the nested links apply made",
    configure_common,
    _run_reset,
)
