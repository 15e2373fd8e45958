"""`tools/patches verify [UPSTREAM...] [--json] [--allow-missing] [--record]`: prove the series.

Three proofs, each a table (verify/session.py runs them in one pool):
- tripwires: each patch's `Test:` passes with the series and fails with that patch left out
  (verify/tripwire.py);
- upstream tests: each patch's `Upstream-Test:` (the test its PR carries) passes on the series
  and fails with the patch's source change left out, run from the upstream tree under its own
  pytest configuration (verify/upstream_proof.py);
- the regression gate: the upstream's own tests of the directories the series touches, before
  the series and after it; a test that passed before and not after fails verify, naming the
  test and the patch that broke it (verify/regression.py). The "before" run waits for the
  series run and leaves out the tests that pass there (verify/baseline.py; `--full-baseline`
  runs them too).
Every state runs in a scratch tree of its own, in a process of its own forked by a server that
imported the third-party modules once (verify/forkserver.py), in parallel (`--jobs`, default the
cores); the checkouts are only read. `--record` writes the figures to docs/upstream-tests.json
for the status page. Exit FAILED when a patch is not proven or a test is broken (unless only
missing sources and --allow-missing).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from ..command import Command, root_of
from ..errors import ExitCode
from ..model.manifest import Upstream, load_manifest
from ..rebase.on_main import MainSeries, replay_on_main
from ..verify.on_main import OnMain, verify_on_main
from ..verify.pytest_run import venv_python
from ..verify.record import (
    MAIN_RECORD_PATH,
    RECORD_PATH,
    main_record_data,
    write_main_record,
    write_record,
)
from ..verify.regression import Gate
from ..verify.session import Options, StackResult, verify_stack
from ..verify.tripwire import Proof
from ..verify.upstream_proof import UpstreamProof


def _table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    head = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    return [line.rstrip() for line in (head, "  ".join("-" * w for w in widths), *lines)]


def render_table(proofs: list[Proof]) -> str:
    headers = ("upstream", "patch", "with patch", "without patch", "verdict", "source")
    rows = [
        (p.upstream, p.patch, p.with_patch, p.without_patch, p.verdict, p.source) for p in proofs
    ]
    out = _table(headers, rows) + [f"  {p.patch}: {p.detail}" for p in proofs if p.detail]
    return "\n".join(line.rstrip() for line in out)


def render_upstream(proofs: list[UpstreamProof]) -> str:
    headers = ("upstream", "patch", "upstream tests", "with fix", "source left out", "verdict")
    rows = [
        (p.upstream, p.patch, str(len(p.tests)), p.with_fix, p.without_fix, p.verdict)
        for p in proofs
    ]
    out = _table(headers, rows) + [f"  {p.patch}: {p.detail}" for p in proofs if p.detail]
    return "\n".join(out)


def render_gate(gate: Gate) -> str:
    t = gate.total
    lines = [
        f"regression gate {gate.upstream} (before: {gate.baseline}): {len(gate.dirs)} test "
        f"directories, {t.run} tests: {t.passed} pass, {t.broken} broken by the series, "
        f"{t.failing_before} not passing before, {t.failing_after} failing after, {t.skipped} "
        f"skipped, {t.added} added, {t.fixed} fixed"
        + (
            f" ({t.not_run_before} passing on the series not run before: --full-baseline "
            "counts what they fixed)"
            if t.not_run_before
            else ""
        )
    ]
    lines += [f"  {n:5d}  {why}" for why, n in t.causes.items()]
    for b in gate.broken:
        if b.known:
            lines.append(f"  known broken (patches/upstream-tests.toml) {b.node}: {b.known}")
        else:
            lines.append(f"  BROKEN {b.node} by {b.patch}: {b.before} -> {b.after}: {b.detail}")
    lines += [
        f"  not gated in this run (verify --full-gate): {d}: {why}"
        for d, why in gate.deferred.items()
    ]
    lines += [
        f"  no longer broken, remove from known_broken in patches/upstream-tests.toml: {node}"
        for node in gate.stale_known
    ]
    return "\n".join(lines)


def render(result: StackResult, opts: Options) -> str:
    parts = []
    if opts.tripwires:
        parts.append(render_table(result.proofs))
    if opts.own_tests and result.upstream:
        parts.append(render_upstream(result.upstream))
    parts += [render_gate(gate) for gate in result.gates]
    parts += result.notes
    return "\n\n".join(parts)


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
    parser.add_argument("--no-tripwires", action="store_true", help="skip our Test: proofs")
    parser.add_argument(
        "--no-upstream-tests",
        action="store_true",
        help="skip the Upstream-Test: proofs and the regression gate",
    )
    parser.add_argument("--no-gate", action="store_true", help="skip the regression gate")
    parser.add_argument(
        "--full-gate",
        action="store_true",
        help="also gate the test directories patches/upstream-tests.toml defers (slow)",
    )
    parser.add_argument(
        "--full-baseline",
        action="store_true",
        help="run every gate test on the baseline too, not only those that do not pass on the "
        "series (which alone can be broken); counts the tests the series fixed (--record "
        "implies it)",
    )
    parser.add_argument(
        "--fresh",
        "--fresh-gate",
        dest="fresh",
        action="store_true",
        help="run every state even when .cache/patchtool/states holds its outcomes for the "
        "same trees, tests, environment and plugins (and keep the new ones)",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help=f"write the upstream-test figures to {RECORD_PATH} (for the status page)",
    )
    parser.add_argument(
        "--on",
        metavar="REF",
        help="prove each patch's Upstream-Test: on the upstream's REF (e.g. main) with every "
        "patch's port (else the pin patch) applied there, instead of on the pin (no tripwires, "
        f"no gate); with --record, to {MAIN_RECORD_PATH}",
    )
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="exit 0 when an upstream's source is missing (its patches are reported unverified)",
    )


def _failed(result: StackResult, opts: Options, allow_missing: bool) -> bool:
    unproven = [p for p in result.proofs if not p.proven and p.verdict != "no tripwire"]
    missing_only = all(p.unavailable for p in unproven)
    if opts.tripwires and unproven and not (missing_only and allow_missing):
        return True
    if opts.own_tests and any(not p.proven and not p.excused for p in result.upstream):
        return True
    return any(gate.new_broken for gate in result.gates)


def _document(result: StackResult) -> dict[str, object]:
    """The --json document: `patches` (the tripwire proofs, as before), then the upstream
    half: `upstream_tests`, `gates`, `notes`, and where the time went."""
    return {
        "patches": [asdict(p) for p in result.proofs],
        "upstream_tests": [asdict(p) for p in result.upstream],
        "gates": [asdict(g) for g in result.gates],
        "notes": result.notes,
        "seconds": result.seconds,
        "timings": result.timings,
    }


def _run_on(args: argparse.Namespace, root: Path, python: Path, ups: list[Upstream]) -> int:
    """`verify --on REF`: the series replayed on each upstream's REF, its upstream tests proven."""
    replays: list[MainSeries] = []
    try:
        for up in ups:
            replays.append(replay_on_main(root, up, args.on))
            r = replays[-1]
            print(
                f"[verify] {up.name}: {len(r.series)} patches on {args.on} {r.commit[:12]} "
                f"({len(r.ported)} from their port), {len(r.left_out)} do not apply",
                file=sys.stderr,
                flush=True,
            )
        items = [OnMain(up, r.repo, r.series) for up, r in zip(ups, replays, strict=True)]
        proofs, timings = verify_on_main(
            root, python, items, not args.json, args.jobs or os.cpu_count() or 1,
            not args.no_fork_server,
        )  # fmt: skip
    finally:
        for r in replays:
            r.close()
    data = main_record_data(
        root, args.on, [(r.upstream, r.commit, r.ported, r.left_out) for r in replays], proofs
    )
    if args.record:
        write_main_record(root, data)
    if args.json:
        print(json.dumps({**data, "timings": timings}, indent=2))
    else:
        notes = [
            f"  {r.upstream}: {n} left out: {why}" for r in replays for n, why in r.left_out.items()
        ]
        print("\n".join([render_upstream(proofs), *notes]))
    unproven = [p for p in proofs if not p.proven and not p.excused]
    return ExitCode.FAILED if unproven or any(r.left_out for r in replays) else ExitCode.OK


def _run(args: argparse.Namespace) -> int:
    root = root_of(args)
    python = Path(args.python) if args.python else venv_python(root)
    ups = load_manifest(root).select(args.upstreams)
    if args.on:
        return _run_on(args, root, python, ups)
    opts = Options(
        jobs=args.jobs or os.cpu_count() or 1,
        fork_server=not args.no_fork_server,
        tripwires=not args.no_tripwires,
        own_tests=not args.no_upstream_tests,
        gate=not (args.no_upstream_tests or args.no_gate),
        full_gate=args.full_gate,
        full_baseline=args.full_baseline or args.record,
        fresh=args.fresh,
    )
    result = verify_stack(root, ups, python, not args.json, opts)
    if args.record:
        write_record(root, result)
    if args.json:
        print(json.dumps(_document(result), indent=2))
    else:
        print(render(result, opts))
    return ExitCode.FAILED if _failed(result, opts, args.allow_missing) else ExitCode.OK


VERIFY = Command(
    "verify",
    "prove each patch's Test: and Upstream-Test:, and gate the upstream's own tests",
    _configure,
    _run,
)
