"""`tools/patches verify [UPSTREAM...] [--json] [--allow-missing]`: prove each patch's `Test:`
passes with the series and fails with that patch left out (verify/tripwire.py), as a table.
Every state runs in a scratch tree of its own, in a process of its own forked by a server that
imported the third-party modules once (verify/forkserver.py), in parallel (`--jobs`, default the
cores); the checkouts are only read.
Exit FAILED when a patch is not proven (unless only missing sources and --allow-missing).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from ..command import Command, root_of
from ..core.manifest import load_manifest
from ..errors import ExitCode
from ..verify.pytest_run import venv_python
from ..verify.tripwire import Proof, verify_upstreams


def render_table(proofs: list[Proof]) -> str:
    headers = ("upstream", "patch", "with patch", "without patch", "verdict", "source")
    rows = [
        (p.upstream, p.patch, p.with_patch, p.without_patch, p.verdict, p.source) for p in proofs
    ]
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    head = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [head, "  ".join("-" * w for w in widths), *lines]
    out += [f"  {p.patch}: {p.detail}" for p in proofs if p.detail]
    return "\n".join(line.rstrip() for line in out)


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("upstreams", nargs="*", metavar="UPSTREAM")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--python", help="interpreter with pytest (default: <root>/.venv)")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="states run at once, each a scratch tree and a pytest process (default: cores)",
    )
    parser.add_argument(
        "--no-fork-server",
        action="store_true",
        help="run each state as a fresh interpreter instead of a child of the fork server "
        "(slower: every state imports torch and the rest afresh)",
    )
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="exit 0 when an upstream's source is missing (its patches are reported unverified)",
    )


def _run(args: argparse.Namespace) -> int:
    root = root_of(args)
    python = Path(args.python) if args.python else venv_python(root)
    ups = load_manifest(root).select(args.upstreams)
    proofs = verify_upstreams(
        root, ups, python, not args.json, jobs=args.jobs, fork_server=not args.no_fork_server
    )
    if args.json:
        print(json.dumps({"patches": [asdict(p) for p in proofs]}, indent=2))
    else:
        print(render_table(proofs))
    unproven = [p for p in proofs if not p.proven and p.verdict != "no tripwire"]
    missing_only = all(p.unavailable for p in unproven)
    ok = not unproven or (missing_only and args.allow_missing)
    return ExitCode.OK if ok else ExitCode.FAILED


VERIFY = Command(
    "verify",
    "prove each patch's Test: passes with the series and fails with that patch left out",
    _configure,
    _run,
)
