"""Time `tools/patches rebase UPSTREAM --to REF --dry-run` (target: < 15 s, downloads excluded).

One untimed warm-up run fetches/downloads whatever the bases need (release archives land in
`.cache/standins`), then `--runs` timed dry runs replay and classify the series from scratch
(new scratch repo, both bases resolved or materialised, every evidence check). Nothing in
the repository changes.

    .venv/bin/python benchmarks/bench_rebase.py                      # Megatron-LM -> core_v0.19.0
    .venv/bin/python benchmarks/bench_rebase.py --source standin --to core_v0.17.0
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.patchtool.model.series import read_series  # noqa: E402
from tools.patchtool.rebase.bases import MODES  # noqa: E402
from tools.patchtool.rebase.flow import run_rebase  # noqa: E402
from tools.patchtool.rebase.report import summary  # noqa: E402

TARGET_S = 15.0


def once(root: Path, upstream: str, ref: str, source: str) -> tuple[float, str, str]:
    with tempfile.TemporaryDirectory(prefix="bench-rebase-") as tmp:
        start = time.perf_counter()
        result, _report, _ = run_rebase(
            root,
            upstream,
            ref,
            dry_run=True,
            mode=source,
            scratch=Path(tmp) / "scratch",
            report_path=Path(tmp) / "report.md",
        )
        elapsed = time.perf_counter() - start
    kind = "git history" if result.new.history else "release stand-ins"
    return elapsed, summary(result), kind


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--upstream", default="Megatron-LM")
    parser.add_argument("--to", default="core_v0.19.0")
    parser.add_argument("--source", choices=MODES, default="auto")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    series = read_series(args.root / "patches" / args.upstream / "series")
    if not series:
        print(f"{args.upstream}: empty series, nothing to benchmark", file=sys.stderr)
        return 2
    warm, result, kind = once(args.root, args.upstream, args.to, args.source)
    times = [once(args.root, args.upstream, args.to, args.source)[0] for _ in range(args.runs)]
    median = statistics.median(times)
    print(
        f"rebase --dry-run {args.upstream} ({len(series)} patches) -> {args.to} from {kind}: "
        f"median {median:.2f} s, min {min(times):.2f} s, max {max(times):.2f} s over "
        f"{len(times)} runs (warm-up incl. downloads {warm:.2f} s); {result}; "
        f"target < {TARGET_S:.0f} s: {'met' if median < TARGET_S else 'MISSED'}"
    )
    return 0 if median < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
