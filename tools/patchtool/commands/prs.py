"""`tools/patches prs <Upstream> [--from GITDIR] [--json] [--gh-json FILE]`: per patch of the
series, the upstream PRs whose change touches the patch's lines (prs/scan.py), ranked: same fix,
conflicts, nearby; each with its state and how sure that state is. PR refs come from any git
directory holding `refs/pull/N/head` (default: the upstream's checkout). Exit OK, or an
`error:` line naming the missing ref or file and the fix.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from ..command import Command, root_of
from ..errors import ExitCode
from ..prs.lines import CONFLICTS, NEAR, NEARBY, SAME_FIX
from ..prs.scan import MAX_FILES, Hit, Scan, counts, run_scan

SHOWN = {CONFLICTS: 10, NEARBY: 5}  # PRs listed per patch in text output (the JSON has all)


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("upstream", metavar="UPSTREAM")
    parser.add_argument(
        "--from",
        dest="gitdir",
        default="",
        metavar="GITDIR",
        help="git dir with refs/pull/N/head (default: the upstream's checkout)",
    )
    parser.add_argument(
        "--gh-json",
        default="",
        metavar="FILE",
        help="`gh pr list --state all --json number,state` output: sure open/closed states",
    )
    parser.add_argument("--max-files", type=int, default=MAX_FILES, help="larger PRs: counted")
    parser.add_argument("--near", type=int, default=NEAR, help="lines that make a PR nearby")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _line(hit: Hit) -> str:
    like = hit.like
    share = (
        f", has {like.lines:.0%} of our lines, {like.names:.0%} of our names" if like.names else ""
    )
    named = ", named in the patch" if hit.named else ""
    return (
        f"  {hit.verdict:<9} #{hit.number:<6} {hit.state.text()}, from {hit.target}, "
        f"{hit.files} files{share}{named}"
    )


def _print(result: Scan) -> None:
    print(
        f"{result.upstream}: {len(result.patches)} patches; {result.heads} PR heads "
        f"({result.merge_refs} /merge refs) in {result.gitdir}; {result.in_pin} already in the "
        f"pin; {result.giant} over {result.max_files} files counted, not listed"
    )
    for patch in result.patches:
        if not patch.hits and not patch.giant:
            continue
        print(patch.name)
        for verdict in (SAME_FIX, CONFLICTS, NEARBY):
            these = [h for h in patch.hits if h.verdict == verdict]
            for hit in these[: SHOWN.get(verdict, len(these))]:
                print(_line(hit))
            if len(these) > SHOWN.get(verdict, len(these)):
                print(f"  ... {len(these) - SHOWN[verdict]} more {verdict} (--json lists them)")
        if patch.giant:
            print(f"  + {len(patch.giant)} PRs over {result.max_files} files on its files")
    c = counts(result)
    print(
        f"patches with a same-fix PR: {c[SAME_FIX]}, conflicting: {c[CONFLICTS]}, nearby "
        f"only: {c[NEARBY]}; {result.seconds:.1f} s ({result.cached}/{result.heads - result.in_pin}"
        " fork points cached)"
    )


def _run(args: argparse.Namespace) -> int:
    result = run_scan(
        root_of(args),
        args.upstream,
        args.gitdir,
        args.gh_json,
        max_files=args.max_files,
        near=args.near,
    )
    if args.json:
        data = {**asdict(result), "counts": counts(result)}
        print(json.dumps(data, indent=1))
    else:
        _print(result)
    return ExitCode.OK


PRS = Command(
    "prs", "upstream PRs on each patch's lines: same fix, conflicts, nearby", _configure, _run
)
