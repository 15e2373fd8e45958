"""`tools/patches <command>`: argparse over a registry of subcommands.

A new command is one module defining a `Command` plus one line in `COMMANDS` below. Every
PatchToolError becomes one `error: ...` line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import sys

from . import (
    check_pins,
    cmd_apply,
    lint,
    open_pr,
    pin,
    rebase_cmd,
    set_status,
    status,
    upstream_check,
    verify,
)
from . import export as export_cmd
from .command import Command
from .errors import PatchToolError

COMMANDS: list[Command] = [
    cmd_apply.APPLY,
    cmd_apply.RESET,
    status.STATUS,
    lint.LINT,
    export_cmd.EXPORT,
    rebase_cmd.REBASE,
    open_pr.OPEN_PR,
    set_status.SET_STATUS,
    check_pins.CHECK_PINS,
    pin.PIN,
    verify.VERIFY,
    upstream_check.UPSTREAM_CHECK,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tools/patches", description="Pinned upstreams and their patch series."
    )
    parser.add_argument("--root", help="superproject root (default: this repository)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        child = sub.add_parser(command.name, help=command.help, description=command.help)
        command.configure(child)
        child.set_defaults(run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except PatchToolError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
