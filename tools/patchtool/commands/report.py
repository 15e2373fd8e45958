"""`tools/patches report [--measure [--tripwires]] [--check] [--json]`: the patch status page,
docs/patches.md and docs/patches.json (status_page/). `--measure` asks the outside world (the
upstream's main, and its feeder branch where the manifest names one, through the rebase
engine; `gh` for PR states); without it, the committed page's measurements are kept for
byte-identical patches. `--check` writes nothing and exits 1 when the committed page is not
what `report` would write, or when an offline mirror (`--mirror-dir`) holds an upstream's
`main` (or feeder branch) and the page is not measured on that commit.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import date
from pathlib import Path

from ..command import Command, root_of
from ..errors import ExitCode, PatchToolError
from ..git.git import git_text
from ..model.manifest import Upstream, load_manifest
from ..prs.scan import cell, run_scan
from ..rebase.bases import GIT
from ..rebase.feeder import FeederResult
from ..rebase.flow import run_rebase
from ..rebase.port import port_applies
from ..rebase.result import PatchResult, RebaseResult
from ..rebase.scratch import remove_scratch
from ..source.mirror import mirror_repo
from ..status_page.live import (
    PORT_APPLIES,
    PORT_FAILS,
    UNKNOWN,
    VERDICTS,
    Measurement,
    feeder_gaps,
    kept_tripwire,
    measurement_gaps,
    pr_state,
)
from ..status_page.page import DOCUMENT, PAGE, current_rows, render, stale, write
from ..status_page.rows import PatchRow
from ..status_page.upstream_tests import main_record_gaps
from ..verify.pytest_run import venv_python
from ..verify.tripwire import TripwireHook, tripwire_hook


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--measure",
        action="store_true",
        help="measure PR states (gh) and how each patch applies to its upstream's main",
    )
    parser.add_argument("--branch", default="main", help="the upstream head to measure against")
    parser.add_argument(
        "--tripwires",
        action="store_true",
        help="with --measure: run each Test: on the head without its patch (needs the venv)",
    )
    parser.add_argument(
        "--prs-from",
        action="append",
        default=[],
        metavar="UPSTREAM=GITDIR",
        help="fill the upstream PRs column from GITDIR's refs/pull/* (repeatable; with "
        "--measure each upstream's checkout is used where it has them)",
    )
    parser.add_argument("--check", action="store_true", help="compare with the committed page")
    parser.add_argument("--json", action="store_true", help="print the JSON document")


def _run(args: argparse.Namespace) -> int:
    root = root_of(args)
    rows, live = current_rows(root)
    if args.measure and not args.check:
        live = _measure(root, list(load_manifest(root).upstreams.values()), rows, live, args)
    if (args.measure or args.prs_from) and not args.check:
        live = _with_prs(root, rows, live, args)
    texts = render(rows, live, root)
    if args.check:
        behind = stale(root, texts)
        if behind:
            raise PatchToolError(
                f"{', '.join(p.as_posix() for p in behind)} not current (the series changed "
                "since it was generated); run tools/patches report and commit the result"
            )
        heads = _mirror_heads(root, args.branch)
        gaps = measurement_gaps(rows, live, heads, args.branch)
        gaps += feeder_gaps(rows, live, _mirror_feeders(root))
        gaps += main_record_gaps(
            root, [(r.upstream, r.name, r.sha256, r.port_sha256) for r in rows], heads
        )
        if gaps:
            raise PatchToolError(
                f"{PAGE} is not measured on the {args.branch} the offline mirror holds: "
                f"{'; '.join(gaps)}; run tools/patches report --measure, or for the on-main "
                "proofs tools/patches verify --on main --record (with that mirror), and commit "
                "the result"
            )
        print(f"{PAGE} and {DOCUMENT} are current ({len(rows)} patches)")
        return ExitCode.OK
    if args.json:
        print(texts[DOCUMENT], end="")
        return ExitCode.OK
    write(root, texts)
    print(f"wrote {PAGE} and {DOCUMENT} ({len(rows)} patches)")
    return ExitCode.OK


def _mirror_commit(name: str, branch: str) -> str:
    """The commit `branch` is at in this run's offline mirror of `name`, "" without one."""
    bare = mirror_repo(name)
    if bare is None:
        return ""
    return git_text(["rev-parse", "--verify", "-q", f"refs/heads/{branch}"], bare, check=False)


def _mirror_heads(root: Path, branch: str) -> dict[str, str]:
    """upstream -> the commit `branch` is at in this run's offline mirror, for each upstream
    whose mirror repository has that branch (the page must be measured there)."""
    heads = {name: _mirror_commit(name, branch) for name in load_manifest(root).upstreams}
    return {name: commit for name, commit in heads.items() if commit}


def _mirror_feeders(root: Path) -> dict[str, tuple[str, str]]:
    """upstream -> (feeder branch, its commit) in this run's offline mirror, where it has it."""
    feeders = {
        up.name: (up.feeder, _mirror_commit(up.name, up.feeder))
        for up in load_manifest(root).upstreams.values()
        if up.feeder
    }
    return {name: pair for name, pair in feeders.items() if pair[1]}


@contextmanager
def _replayed(
    root: Path, name: str, ref: str, hook: TripwireHook | None = None
) -> Iterator[RebaseResult | None]:
    """The series of `name` replayed on `ref` as it is now (a dry run); None, said on stderr
    (its rows keep their last measurement), when `ref` cannot be read now. The replay's
    scratch repository (kept by a conflict for a hand finish) lives until the block ends."""
    print(f"report: {name}: replaying the series on {ref}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="patches-report-") as tmp:
        try:
            result, _, _ = run_rebase(
                root, name, ref, dry_run=True, mode=GIT,
                report_path=Path(tmp) / "report.md", tripwire=hook,
            )  # fmt: skip
        except PatchToolError as exc:
            _keeps(name, f"{ref}: {UNKNOWN} ({exc})")
            yield None
            return
    try:
        if not result.new.resolved_from.endswith("(now)"):  # a local ref: maybe years old
            _keeps(name, f"{ref} only from {result.new.resolved_from}")
            yield None
        else:
            yield result
    finally:
        remove_scratch(Path(result.scratch))


def _measure(
    root: Path,
    upstreams: list[Upstream],
    rows: list[PatchRow],
    live: list[Measurement],
    args: argparse.Namespace,
) -> list[Measurement]:
    """New measurements for every row: head classification (per upstream), tripwire, PR. An
    upstream whose head cannot be replayed keeps its rows' earlier measurement; without
    --tripwires a verdict measured on the same head is kept."""
    today = date.today().isoformat()
    heads: dict[tuple[str, str], tuple[PatchResult, str]] = {}
    unreachable: set[str] = set()
    python = venv_python(root) if args.tripwires else None
    for up in upstreams:
        if not any(r.upstream == up.name for r in rows):
            continue
        hook = tripwire_hook(root, up.name, python) if python is not None else None
        with _replayed(root, up.name, args.branch, hook) as result:
            if result is None:
                unreachable.add(up.name)
                continue
            for res in result.patches:
                heads[(up.name, res.name)] = (res, result.new.upstream_commit)
    by_name = {up.name: up for up in upstreams}
    measured = [
        m
        if row.upstream in unreachable
        else _with_port(
            root, by_name[row.upstream], row, _measured(row, m, heads.get(row.key), today)
        )
        for row, m in zip(rows, live, strict=True)
    ]
    feeders = {
        up.name: on_feeder for up in upstreams if up.feeder and (on_feeder := _on_feeder(root, up))
    }
    return [
        _with_feeder(row, m, feeders[row.upstream], today) if row.upstream in feeders else m
        for row, m in zip(rows, measured, strict=True)
    ]


def _prs_sources(root: Path, args: argparse.Namespace) -> dict[str, str]:
    """Upstream -> the git dir its PR refs are read from: --prs-from, and with --measure ""
    (the checkout) for the others."""
    given = dict(item.partition("=")[::2] for item in args.prs_from)
    bad = [k for k, v in given.items() if not v]
    if bad:
        raise PatchToolError(f"--prs-from {bad[0]}: give it as UPSTREAM=GITDIR")
    if args.measure:
        for name in load_manifest(root).upstreams:
            given.setdefault(name, "")
    return given


def _with_prs(
    root: Path, rows: list[PatchRow], live: list[Measurement], args: argparse.Namespace
) -> list[Measurement]:
    """The upstream PRs column measured for the upstreams with PR refs at hand; the others keep
    theirs (a checkout without refs/pull/* is skipped unless named by --prs-from)."""
    today = date.today().isoformat()
    cells: dict[tuple[str, str], str] = {}
    for name, gitdir in _prs_sources(root, args).items():
        try:
            result = run_scan(root, name, gitdir, "")
        except PatchToolError as exc:
            if gitdir:
                raise
            print(f"report: {name}: upstream PRs not measured ({exc})", file=sys.stderr)
            continue
        cells.update({(name, p.name): cell(p) for p in result.patches})
    return [
        replace(
            m,
            upstream_prs=cells[row.key],
            upstream_prs_measured=today,
            sha256=row.sha256,  # a measurement belongs to the bytes it measured
            port_sha256=row.port_sha256,
        )
        if row.key in cells
        else m
        for row, m in zip(rows, live, strict=True)
    ]


def _on_feeder(root: Path, up: Upstream) -> FeederResult | None:
    """The series replayed on `up`'s feeder branch, with each conflict's causes (looked up in
    the replay's scratch repository first: it holds the pin and the branch); None (rows keep
    their last feeder measurement) when the branch cannot be read now."""
    with _replayed(root, up.name, up.feeder) as result:
        if result is None:
            return None
        commit = result.new.upstream_commit
        return FeederResult.of(root, up, result.patches, commit, [Path(result.scratch)])


def _with_feeder(row: PatchRow, m: Measurement, on: FeederResult, today: str) -> Measurement:
    res = on.patches.get(row.name)
    return replace(
        m,
        feeder=res.classification if res is not None else UNKNOWN,
        feeder_commit=on.commit,
        feeder_measured=today,
        feeder_cause="; ".join(c.text() for c in on.causes.get(row.name, [])),
        sha256=row.sha256,
    )


def _with_port(root: Path, up: Upstream, row: PatchRow, m: Measurement) -> Measurement:
    """`m` with whether the row's port applies on the same head (open-pr opens the port)."""
    if not row.port_sha256 or not m.head_commit:
        return replace(m, port="", port_sha256="")
    patch_file = root / up.series_dir / row.name
    try:
        applies = port_applies(root, up, patch_file, m.head_commit)
    except PatchToolError as exc:
        print(f"report: {row.name}: port not measured ({exc})", file=sys.stderr)
        return replace(m, port=UNKNOWN, port_sha256=row.port_sha256)
    return replace(m, port=PORT_APPLIES if applies else PORT_FAILS, port_sha256=row.port_sha256)


def _keeps(upstream: str, why: str) -> None:
    print(f"report: {upstream}: {why}; its rows keep their last measurement", file=sys.stderr)


def _measured(
    row: PatchRow, prior: Measurement, head: tuple[PatchResult, str] | None, today: str
) -> Measurement:
    res, commit = head if head is not None else (None, "")
    verdict, when = _tripwire_verdict(res), today
    kept = kept_tripwire(prior, commit) if verdict == "not run" else None
    if kept is not None:
        verdict, when = kept
    return replace(
        prior,
        pr_state=pr_state(row),
        head=res.classification if res is not None else UNKNOWN,
        head_commit=commit,
        tripwire=verdict,
        tripwire_measured=when if verdict in VERDICTS else "",
        measured=today,
        sha256=row.sha256,
    )


def _tripwire_verdict(res: PatchResult | None) -> str:
    if res is None:
        return UNKNOWN
    if any(e.kind == "tripwire" for e in res.evidence):
        return "passes without the patch"
    if any(n.startswith("tripwire (hook could not") for n in res.not_checked):
        return "could not run"
    if any(n.startswith("tripwire (no test hook") for n in res.not_checked):
        return "not run"
    return "fails without the patch"


REPORT = Command("report", "write the patch status page (docs/patches.md, .json)", _configure, _run)
