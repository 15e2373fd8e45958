"""`tools/patches check-pins [--json]`: are the pins one coherent stack (source/pin_check.py)?

Prints one line per relation and a verdict. Exit OK coherent, FAILED incoherent (ahead,
behind, diverged, a violated version bound), NOT_VERIFIED partly unknown.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from ..command import Command, root_of
from ..errors import ExitCode
from ..source.pin_check import check_pins, exit_code


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _run(args: argparse.Namespace) -> int:
    relations = check_pins(root_of(args))
    code = exit_code(relations)
    if args.json:
        print(
            json.dumps(
                {"coherent": code == 0, "relations": [asdict(r) for r in relations]}, indent=2
            )
        )
        return code
    for r in relations:
        if r.target == "*":
            print(f"{r.holder}@{r.holder_pin}: {r.state} ({r.detail})")
        elif r.kind == "nested-gitlink":
            theirs = r.theirs[:12] if r.theirs else "?"
            print(
                f"{r.holder}@{r.holder_pin} nests {r.target} at {theirs}; "
                f"ours {r.ours[:12]}: {r.state} ({r.detail})"
            )
        else:
            print(f"{r.holder}@{r.holder_pin} requires {r.theirs}; ours {r.ours or '?'}: {r.state}")
    verdict = {
        ExitCode.OK: "pins coherent",
        ExitCode.FAILED: "pins INCOHERENT",
        ExitCode.NOT_VERIFIED: "coherence partly unknown",
    }
    print(verdict[code])
    return code


CHECK_PINS = Command(
    "check-pins", "are the pins coherent (nested gitlinks, version bounds)?", _configure, _run
)
