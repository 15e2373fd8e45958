"""`tools/patches lint [UPSTREAM...] [--json]`: one `file:line: message` per problem
(lint/lint.py); also the pre-commit hook. Exit FAILED on any problem, else OK ("lint: ok").
"""

from __future__ import annotations

import argparse
import json

from ..command import Command, root_of
from ..errors import ExitCode
from ..lint.lint import lint_all
from ..model.manifest import load_manifest


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("upstreams", nargs="*", metavar="UPSTREAM")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _run(args: argparse.Namespace) -> int:
    root = root_of(args)
    errors = lint_all(root, load_manifest(root), args.upstreams)
    if args.json:
        print(json.dumps({"ok": not errors, "errors": [e.__dict__ for e in errors]}, indent=2))
    else:
        for error in errors:
            print(error)
        if not errors:
            print("lint: ok")
    return ExitCode.FAILED if errors else ExitCode.OK


LINT = Command(
    "lint", "check series, patches, trailers, tests, paths and gitlink pins", _configure, _run
)
