"""Benchmark `tools/patches verify` of the whole series: tripwires, upstream tests and the
regression gate, from a warm checkout (applied, venv synced).

Prints the wall time of each part run alone and of the full run, the load average before and
after, and where the time goes: summed process wall per kind of state and the slowest states
(target: the full run at most 5 minutes on 2 cores). Never asserts.

    python3 benchmarks/bench_verify.py [--jobs N] [--parts all,tripwires,upstream]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TOOL = [sys.executable, str(REPO_ROOT / "tools" / "patches")]
PARTS = {
    "all": [],
    "tripwires": ["--no-upstream-tests"],
    "upstream": ["--no-tripwires"],
}


def run(flags: list[str], jobs: int | None) -> tuple[float, dict[str, object]]:
    """One verify run: (wall seconds, its --json document)."""
    cmd = [*TOOL, "verify", "--json", "--allow-missing", *flags]
    cmd += [f"--jobs={jobs}"] if jobs else []
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    try:
        document = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(
            f"verify {' '.join(flags)} failed (exit {proc.returncode}): {proc.stderr[-800:]}"
        ) from None
    return wall, document


def slowest(document: dict[str, object], top: int = 6) -> list[str]:
    """The slowest states of a run (verify's `timings`: label, wall, CPU)."""
    timings = sorted(document.get("timings", []), key=lambda t: -t[1])  # type: ignore[arg-type]
    return [f"{wall:7.1f} s wall, {cpu:6.1f} s CPU  {label}" for label, wall, cpu in timings[:top]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--parts", default="all,tripwires,upstream")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores; load before: {os.getloadavg()[0]:.1f}")
    for part in args.parts.split(","):
        wall, document = run(PARTS[part], args.jobs)
        states = document.get("seconds", {})
        gates = document.get("gates", [])
        tests = sum(int(g["total"]["run"]) for g in gates)  # type: ignore[index]
        print(f"\nverify ({part}): {wall:.0f} s wall; load after {os.getloadavg()[0]:.1f}")
        print(f"  summed state wall: {json.dumps(states)}; gate tests on the series: {tests}")
        for line in slowest(document):
            print("  " + line)


if __name__ == "__main__":
    main()
