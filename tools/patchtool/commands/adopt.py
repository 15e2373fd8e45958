"""`tools/patches adopt <Upstream> <N> (--test NODE | --replaces PATCH) [--from GITDIR]
[--name FILE]`: carry upstream PR #N as a patch of the series (prs/adopt.py): its change from its
fork point merged onto the pin with the series, its author kept, `Upstream-Status: submitted
<PR URL>`, its new tests as `Upstream-Test:`, NODE as the tripwire `Test:`. With `--replaces`,
in the place of our patch that makes the same fix (retired, the PR named), whose tripwire it
takes unless --test is given. `rebase`/`roll` retire it as "merged upstream as #N" once the
target has it. Lint runs on the result. Exit OK, FAILED with lint's problems (the patch stays
written), or an `error:` line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..command import Command, root_of
from ..errors import ExitCode, PatchToolError
from ..lint.lint import lint_all
from ..model.manifest import load_manifest
from ..model.series import RETIRED_DIR
from ..prs.adopt import adopt
from ..prs.scan import default_gitdir


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("upstream", metavar="UPSTREAM")
    parser.add_argument("number", type=int, metavar="N", help="the upstream PR number")
    parser.add_argument(
        "--test",
        default="",
        metavar="NODE",
        help="the tripwire in this repository (tests/patches/...::test_x) that fails without it "
        "(default with --replaces: the replaced patch's Test: lines)",
    )
    parser.add_argument(
        "--replaces",
        default="",
        metavar="PATCH",
        help="our patch making the same fix: the PR takes its place in the series, ours is "
        "retired naming the PR",
    )
    parser.add_argument(
        "--from",
        dest="gitdir",
        default="",
        metavar="GITDIR",
        help="git dir with refs/pull/N/head (default: the upstream's checkout)",
    )
    parser.add_argument("--name", default="", help="patch file name (default: pr<N>-<subject>)")


def _run(args: argparse.Namespace) -> int:
    root = root_of(args)
    manifest = load_manifest(root)
    up = manifest.select([args.upstream])[0]
    gitdir = Path(args.gitdir).resolve() if args.gitdir else default_gitdir(root, up)
    if not gitdir.exists():
        raise PatchToolError(f"--from {gitdir}: no such directory; pass a git dir with refs/pull/*")
    name = args.name if not args.name or args.name.endswith(".patch") else args.name + ".patch"
    replaces = Path(args.replaces).name if args.replaces else ""
    done = adopt(root, up, gitdir, args.number, args.test, name, replaces)
    print(f"adopted #{done.number} ({done.url}, head {done.head[:12]}, fork {done.fork[:12]})")
    where = f"in the place of {done.replaced}" if done.replaced else "last in the series"
    print(f"patch:   {up.series_dir / done.name} ({where})")
    if done.replaced:
        retired = up.series_dir / RETIRED_DIR / done.replaced
        print(f"retired: {retired} (superseded by #{done.number})")
    print(f"author:  {done.author}")
    print(f"subject: {done.subject}")
    tests = ", ".join(done.upstream_tests) or "none found (module-level test_ functions it adds)"
    print(f"upstream tests: {tests}")
    errors = [e for e in lint_all(root, manifest, [up.name]) if done.name in e.file]
    for error in errors:
        print(error)
    export = f" && tools/patches export {up.name}" if done.later else ""
    print(
        f"next: tools/patches apply {up.name}{export} && tools/patches verify {up.name}; "
        f"commit {up.series_dir}"
    )
    return ExitCode.FAILED if errors else ExitCode.OK


ADOPT = Command("adopt", "carry an upstream PR as a patch of the series", _configure, _run)
