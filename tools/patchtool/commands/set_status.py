"""`tools/patches set-status PATCH KIND [DETAIL]`: record a patch's Upstream-Status in the patch
file and, when applied, in branch `patched` (pr/patch_status.py). Prints what changed.
"""

from __future__ import annotations

import argparse

from ..command import Command, root_of
from ..pr.patch_status import set_status


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("patch", metavar="PATCH", help="patches/<Upstream>/<name>.patch")
    parser.add_argument(
        "kind", choices=["pending", "submitted", "accepted", "not-needed", "inappropriate"]
    )
    parser.add_argument("detail", nargs="?", default="", help="PR URL, commit/tag, or reason")


def _run(args: argparse.Namespace) -> int:
    changed = set_status(root_of(args), args.patch, args.kind, args.detail)
    print("\n".join(changed) if changed else "already set; nothing changed")
    return 0


SET_STATUS = Command(
    "set-status", "record Upstream-Status (e.g. submitted <PR URL>) in a patch", _configure, _run
)
