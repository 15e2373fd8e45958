"""`tools/patches roll [--to-nemo-rl REF] [--dry-run] [--json]`: move the three pins to the
newest coherent triple (rebase/roll.py) in one commit, or stop with the report and nothing
changed. Exit CONFLICT when a patch conflicts or needs a 3-way merge, else OK.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from ..command import Command, root_of
from ..errors import ExitCode
from ..model.manifest import Upstream, load_manifest, short
from ..rebase.engine import TripwireHook
from ..rebase.report import table
from ..rebase.roll import (
    MOVE,
    STOP,
    RollPlan,
    check_clean,
    commit_roll,
    next_steps,
    plan_roll,
    write_roll,
)
from ..rebase.roll_pr import open_roll_pr
from ..status_page.page import PAGE, current_rows, render, write
from ..verify.pytest_run import venv_python
from ..verify.tripwire import tripwire_hook


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--to-nemo-rl",
        default="",
        metavar="REF",
        help="NeMo-RL commit, tag or branch to roll to (default: the newest commit on its main)",
    )
    parser.add_argument("--dry-run", action="store_true", help="classify only; change nothing")
    parser.add_argument("--json", action="store_true", help="machine-readable result")
    parser.add_argument(
        "--open-pr",
        action="store_true",
        help="after a move: push the commit to roll/nemo-rl-<sha> on origin and gh pr create",
    )
    parser.add_argument(
        "--no-tripwires",
        action="store_true",
        help="skip running each moved patch's Test: on its new base without the patch",
    )


def _run(args: argparse.Namespace) -> int:
    root = root_of(args)
    if not args.dry_run:
        check_clean(root, load_manifest(root))
    python = None if args.no_tripwires else venv_python(root)  # refuses early without a venv

    def tripwire_for(up: Upstream) -> TripwireHook | None:
        return None if python is None else tripwire_hook(root, up.name, python)

    roll = plan_roll(
        root,
        args.to_nemo_rl,
        tripwire_for=tripwire_for,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    written = write_roll(root, roll, _command_line(args), dry_run=args.dry_run)
    commit, url = "", ""
    if roll.decision == MOVE and not args.dry_run:
        if (root / PAGE).is_file():  # the status page moves with the series it describes
            written += write(root, render(*current_rows(root), root))
        commit = commit_roll(root, roll, written)
        if args.open_pr:
            page = (root / PAGE).read_text(encoding="utf-8") if (root / PAGE).is_file() else ""
            url = open_roll_pr(root, roll, page=page)
    if args.json:
        payload = roll.to_json()
        payload.update(dry_run=args.dry_run, written=written, commit=commit, pull_request=url)
        payload["next_steps"] = next_steps(roll)
        print(json.dumps(payload, indent=2, sort_keys=True))
    else:
        _print(roll, args.dry_run, written, commit)
        if url:
            print(f"pull request: {url}")
    return ExitCode.CONFLICT if roll.decision == STOP else ExitCode.OK


def _print(roll: RollPlan, dry_run: bool, written: list[str], commit: str) -> None:
    print(f"roll to NeMo-RL {roll.target_ref}:")
    width = max(len(p.move.upstream.name) for p in roll.planned)
    for p in roll.planned:
        up = p.move.upstream
        same = " (stays)" if p.move.commit == up.commit else ""
        print(
            f"  {up.name.ljust(width)}  {short(up.commit)} -> {short(p.move.commit)}{same}  "
            f"{p.move.reason}"
        )
    for p in roll.planned:
        assert p.result is not None
        print()
        print(table(p.result))
    print()
    if roll.decision == STOP:
        print("stop: " + "; ".join(roll.blockers) + " (a roll moves only clean, offset or")
        print("upstreamed patches); nothing changed. Resolve, then roll again:")
        for cmd in next_steps(roll):
            print("  " + shlex.join(cmd))
    elif roll.decision != MOVE:
        print("up to date: every pin is already at the triple")
    elif dry_run:
        print("dry run: would move the pins above in one commit; nothing changed")
    else:
        print(f"moved in one commit {commit[:12]}: " + ", ".join(written))
        print("next: git submodule update --checkout && tools/apply_patches.sh && uv sync")


def _command_line(args: argparse.Namespace) -> list[str]:
    """The invocation as the reports show it."""
    cmd = ["tools/patches", "roll"]
    cmd += ["--to-nemo-rl", args.to_nemo_rl] if args.to_nemo_rl else []
    cmd += ["--dry-run"] if args.dry_run else []
    cmd += ["--no-tripwires"] if args.no_tripwires else []
    return cmd


ROLL = Command(
    "roll",
    "move the three pins together to NeMo-RL's newest commit and its nested pins",
    _configure,
    _run,
)
