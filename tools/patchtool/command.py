"""The subcommand registry entry: a name, argparse configuration, and a runner."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# tools/patchtool/command.py -> the repository root.
DEFAULT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Command:
    """One `tools/patches <name>` subcommand; `run` returns the exit code."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def root_of(args: argparse.Namespace) -> Path:
    """The superproject root the command works on (`--root`, default: this repository)."""
    return Path(args.root).resolve() if getattr(args, "root", None) else DEFAULT_ROOT
