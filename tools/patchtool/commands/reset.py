"""`tools/patches reset`: check out each pinned commit (detached)."""

from __future__ import annotations

import argparse

from ..command import Command, root_of
from ..core.apply import reset_upstream
from ..outcomes import configure_common, each, report


def _run_reset(args: argparse.Namespace) -> int:
    root = root_of(args)
    return report(args, each(args, lambda up: reset_upstream(root, up, force=args.force)))


RESET = Command("reset", "check out each pinned commit (detached)", configure_common, _run_reset)
