"""`tools/patches <command>`: argparse over a registry of subcommands.

A new command is one module `commands/<verb>.py` defining a `Command` plus one line in
`COMMANDS` below; command modules never import each other (shared logic lives in the layers
below them: docs/layers.md). Only the module of the command being run is imported, so each
command starts with just its own imports (`apply` is measured against plain `git am`). Every
PatchToolError becomes one `error: ...` line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from contextlib import ExitStack

from .command import Command, root_of
from .command_lock import command_lock
from .errors import ExitCode, PatchToolError
from .interrupts import signals_interrupt

# command name -> (module in patchtool.commands, its Command attribute), in --help order.
COMMANDS: dict[str, tuple[str, str]] = {
    "apply": ("apply", "APPLY"),
    "reset": ("reset", "RESET"),
    "status": ("status", "STATUS"),
    "lint": ("lint", "LINT"),
    "export": ("export", "EXPORT"),
    "rebase": ("rebase", "REBASE"),
    "open-pr": ("open_pr", "OPEN_PR"),
    "port": ("port", "PORT"),
    "set-status": ("set_status", "SET_STATUS"),
    "check-pins": ("check_pins", "CHECK_PINS"),
    "pin": ("pin", "PIN"),
    "roll": ("roll", "ROLL"),
    "report": ("report", "REPORT"),
    "verify": ("verify", "VERIFY"),
    "upstream-check": ("upstream_check", "UPSTREAM_CHECK"),
    "prs": ("prs", "PRS"),
    "adopt": ("adopt", "ADOPT"),
}

# Commands that may reach an upstream (clone, fetch, probe) or report where a source came
# from: they take --mirror-dir (source/mirror.py); PATCHTOOL_MIRROR_DIR applies to every command.
MIRROR_COMMANDS = frozenset(
    {"apply", "reset", "status", "rebase", "pin", "port", "roll", "report", "check-pins"}
)


def load(name: str) -> Command:
    module, attr = COMMANDS[name]
    command = getattr(importlib.import_module(f".commands.{module}", __package__), attr)
    assert isinstance(command, Command) and command.name == name
    return command


def _chosen(argv: list[str]) -> str | None:
    """The command named on the command line (skipping --root's value), if any."""
    args = iter(argv)
    for arg in args:
        if arg == "--root":
            next(args, None)
        elif arg in COMMANDS:
            return arg
    return None


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tools/patches", description="Pinned upstreams and their patch series."
    )
    parser.add_argument("--root", help="superproject root (default: this repository)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = _chosen(argv)
    for name in COMMANDS if chosen is None else [chosen]:
        command = load(name)
        child = sub.add_parser(command.name, help=command.help, description=command.help)
        command.configure(child)
        if name in MIRROR_COMMANDS:
            child.add_argument(
                "--mirror-dir",
                metavar="DIR",
                help="offline mirror: DIR/<Upstream>.git bare repos stand in for the submodule "
                "URLs for this run (env PATCHTOOL_MIRROR_DIR); upstreams it lacks fall back",
            )
        child.set_defaults(run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. What it sets up for itself (signal handlers, the mirror) lasts for this
    call only, so callers in the same process (tests, library users) find their state as it was."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    try:
        with signals_interrupt(), ExitStack() as stack:
            _use_mirror(args, stack)
            reading = bool(getattr(args, "check", False) or getattr(args, "dry_run", False))
            with command_lock(root_of(args), args.command, reading):
                return int(args.run(args))
    except PatchToolError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # The reader left (`tools/patches prs X | head`): what it did not read is not an error.
        # stdout now points at nothing so the interpreter's own flush at exit stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.OK


def _use_mirror(args: argparse.Namespace, stack: ExitStack) -> None:
    """Activate the mirror directory of this run, if one is given (flag or environment), until
    `stack` closes."""
    if not (getattr(args, "mirror_dir", None) or os.environ.get("PATCHTOOL_MIRROR_DIR")):
        return  # apply's startup time: nothing more is imported without a mirror
    from .model.manifest import load_manifest
    from .source.mirror import mirror_dir, use_mirror

    directory = mirror_dir(getattr(args, "mirror_dir", None))
    if directory is None:
        return
    plan = stack.enter_context(use_mirror(directory, load_manifest(root_of(args))))
    if args.command in ("apply", "rebase", "pin", "roll"):  # the ones that clone or fetch say so
        for note in plan.skipped:
            print(f"mirror: {note}; used as without a mirror", file=sys.stderr)
