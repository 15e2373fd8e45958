"""`tools/patches export [UPSTREAM...] [--check] [--allow-missing]`: the patched branch back
into patch files (apply/export.py), or with --check a byte-for-byte comparison with them.

Exit FAILED when --check finds a difference (the diff is printed), NOT_VERIFIED when a series
could not be checked here (no patched branch, a proxy) unless --allow-missing, else OK.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..apply.export import diff_export, export_upstream, write_export
from ..command import Command, root_of
from ..errors import ExitCode
from ..git.git import rev
from ..model.manifest import Upstream, load_manifest
from ..model.series import SERIES_FILE, read_series
from ..source.checkout import BRANCH, BRANCH_REF, checkout_dir, is_repo
from ..source.detect import detect_source


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("upstreams", nargs="*", metavar="UPSTREAM", help="default: all")
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 and show the diff if the files differ from a fresh export",
    )
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="exit 0 when an upstream has no patched checkout here (it is reported NOT verified)",
    )


def _has_branch(root: Path, up: Upstream) -> bool:
    repo = checkout_dir(root, up)
    return is_repo(repo) and bool(rev(repo, BRANCH_REF))


def _why_not_exportable(
    root: Path, up: Upstream, count: int, check: bool
) -> tuple[str, bool] | None:
    """(line to print instead of exporting `up`, whether that leaves patches unverified), or
    None when its patched branch can be exported."""
    if not _has_branch(root, up):
        if not count:
            return f"{up.name}: empty series, nothing to export", False
        if check:
            return (
                f"{up.name}: {count} patches NOT verified: no branch {BRANCH} in {up.path} "
                f"(run tools/patches apply {up.name} first)"
            ), True
    source = detect_source(root, up)
    if source.proxy:
        # The proxy's pre-images are not the pin's: an export from it would rewrite the patch
        # for the wrong base. Byte-exactness is checked where the pinned source is.
        return (
            f"{up.name}: {count} patches NOT export-checked: the checkout is a PROXY "
            f"({source.detail}); export needs the pinned source"
        ), True
    return None


def _run(args: argparse.Namespace) -> int:
    root = root_of(args)
    manifest = load_manifest(root)
    code = ExitCode.OK
    for up in manifest.select(args.upstreams):
        entries = read_series(root / up.series_dir / SERIES_FILE)
        skip = _why_not_exportable(root, up, len(entries), args.check)
        if skip is not None:
            line, unverified = skip
            print(line)
            if unverified and code == ExitCode.OK and not args.allow_missing:
                code = ExitCode.NOT_VERIFIED
            continue
        fresh = export_upstream(root, up)
        if args.check:
            diff = diff_export(root, up, fresh)
            if diff:
                sys.stdout.writelines(diff)
                print(
                    f"{up.name}: patch files differ from a fresh export; "
                    f"run tools/patches export {up.name}"
                )
                code = ExitCode.FAILED
            else:
                print(f"{up.name}: {len(fresh.files)} patch files match a fresh export")
        else:
            written = write_export(root, up, fresh)
            what = ", ".join(written) if written else "no changes"
            print(f"{up.name}: exported {len(fresh.files)} patches ({what})")
    return code


EXPORT = Command(
    "export",
    "regenerate patch files from the patched branch (--check: verify byte-identical)",
    _configure,
    _run,
)
