"""Benchmark `tools/patches apply` on a synthetic series: 50 patches over a 2,000-file repo.

Prints the time of `apply` from the pin, of a no-op re-apply, and the ratio of `apply` to a
plain `git am` of the same patch files (targets: ratio <= 1.2, no-op < 0.5 s). Times are
medians over --repeat runs of the real CLI (a fresh Python process each time).

    python3 benchmarks/bench_apply.py [--files 2000] [--patches 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TOOL = [sys.executable, str(REPO_ROOT / "tools" / "patches")]
sys.path.insert(0, str(REPO_ROOT))

from tools.patchtool.git.git import format_patch  # noqa: E402

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "protocol.file.allow",
    "GIT_CONFIG_VALUE_0": "always",
}
TRAILERS = "Upstream-Status: pending\nOrigin: benchmark\nTest: tests/test_trip.py::test_trip\n"


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=ENV, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    return elapsed


def build(tmp: Path, n_files: int, n_patches: int) -> tuple[Path, Path, list[Path], str]:
    """Upstream repo, superproject pinning it, and the series; returns (super, checkout, patches, pin)."""
    upstream = tmp / "upstream"
    upstream.mkdir()
    git(upstream, "init", "-q", "-b", "main")
    for i in range(n_files):
        path = upstream / f"pkg{i // 100:02d}" / f"mod{i:04d}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(f"value_{j} = {i * j}\n" for j in range(60)))
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "initial")
    pin = git(upstream, "rev-parse", "HEAD")
    series_dir = tmp / "super" / "patches" / "Bench"
    series_dir.mkdir(parents=True)
    patches: list[Path] = []
    for k in range(n_patches):
        i = (k * 37) % n_files
        path = upstream / f"pkg{i // 100:02d}" / f"mod{i:04d}.py"
        text = path.read_text().replace("value_30 =", f"value_30 = {k} +", 1)
        path.write_text(text + f"patched_{k} = True\n")
        git(upstream, "commit", "-q", "-am", f"Fix number {k}\n\nWhy: benchmark.\n\n{TRAILERS}")
        patch = series_dir / f"fix-{k:02d}.patch"
        patch.write_bytes(format_patch(upstream, "HEAD~1..HEAD"))
        patches.append(patch)
    git(upstream, "checkout", "-q", "--detach", pin)
    (series_dir / "series").write_text("".join(f"{p.name}\n" for p in patches))
    root = tmp / "super"
    git(root, "init", "-q", "-b", "main")
    git(root, "submodule", "add", "-q", str(upstream), "3rdparty/Bench")
    git(root / "3rdparty/Bench", "checkout", "-q", "--detach", pin)
    (root / "patches" / "upstreams.toml").write_text(
        f'[Bench]\npath = "3rdparty/Bench"\nurl = "{upstream}"\ntag = ""\ncommit = "{pin}"\n'
    )
    return root, root / "3rdparty/Bench", patches, pin


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--patches", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-apply-") as name:
        root, checkout, patches, pin = build(Path(name), args.files, args.patches)
        apply_cmd = [*TOOL, "--root", str(root), "apply", "Bench"]
        am_cmd = ["git", "am", "-k", "--quiet", "--whitespace=nowarn", *map(str, patches)]
        applies, noops, ams = [], [], []
        for _ in range(args.repeat):
            git(checkout, "checkout", "-q", "--detach", pin)
            ams.append(timed(am_cmd, checkout))
            git(checkout, "checkout", "-q", "--detach", pin)
            applies.append(timed(apply_cmd, root))
            noops.append(timed(apply_cmd, root))
            git(checkout, "checkout", "-q", "--detach", pin)
        applied = git(checkout, "rev-list", "--count", f"{pin}..refs/patchtool/applied")
        if applied != str(args.patches):
            raise SystemExit(f"expected {args.patches} applied commits, found {applied}")
    apply_s, noop_s, am_s = (statistics.median(x) for x in (applies, noops, ams))
    print(
        f"synthetic series: {args.patches} patches over {args.files} files, median of {args.repeat}"
    )
    print(f"apply from the pin:   {apply_s:.3f} s")
    print(f"no-op re-apply:       {noop_s:.3f} s   (target < 0.5 s)")
    print(f"plain git am:         {am_s:.3f} s")
    print(f"ratio apply / git am: {apply_s / am_s:.2f}    (target <= 1.2)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
