"""Generated git repositories for the rebase / export / open-pr / pins tests.

Why a helper module: every scenario needs a small upstream with tags and a patch series
made from real commits, exported exactly as the tooling exports them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tools.patchtool.git import format_patch

ENV = {
    "GIT_AUTHOR_NAME": "Up Stream",
    "GIT_AUTHOR_EMAIL": "up@example.invalid",
    "GIT_COMMITTER_NAME": "Up Stream",
    "GIT_COMMITTER_EMAIL": "up@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def run(
    args: list[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
    check: bool = True,
) -> str:
    """Run git in a test repo (plain subprocess; the code under test uses its own runner)."""
    full = dict(os.environ)
    full.update(ENV)
    full.setdefault("GIT_CONFIG_GLOBAL", "/dev/null")
    if env:
        full.update(env)
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=full, capture_output=True, input=input, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"git {args} failed in {cwd}: {proc.stderr.decode()}")
    return proc.stdout.decode().strip()


def numbered(n: int, prefix: str = "line") -> list[str]:
    return [f"{prefix} {i}" for i in range(1, n + 1)]


def write(repo: Path, rel: str, lines: list[str]) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def commit(repo: Path, message: str, files: dict[str, list[str]]) -> str:
    for rel, lines in files.items():
        write(repo, rel, lines)
    run(["add", "--", *files], repo)
    run(["commit", "-q", "-m", message], repo)
    return run(["rev-parse", "HEAD"], repo)


def init_repo(path: Path, files: dict[str, list[str]], tag: str = "v1") -> str:
    """A repo with one commit holding `files`, tagged `tag`; returns the commit id."""
    path.mkdir(parents=True)
    run(["init", "-q", "-b", "main"], path)
    sha = commit(path, "initial", files)
    if tag:
        run(["tag", tag], path)
    return sha


def make_patch(
    repo: Path, base: str, files: dict[str, list[str]], subject: str, trailers: list[str]
) -> bytes:
    """A format-patch mbox of one commit on `base` changing `files`; repo HEAD is restored."""
    head = run(["rev-parse", "HEAD"], repo)
    branch = run(["symbolic-ref", "-q", "--short", "HEAD"], repo, check=False)
    run(["checkout", "-q", "--detach", base], repo)
    message = f"{subject}\n\nWhy: a test fix.\n\n" + "\n".join(trailers) + "\n"
    for rel, lines in files.items():
        write(repo, rel, lines)
    run(["add", "--", *files], repo)
    run(["commit", "-q", "-F", "-"], repo, input=message.encode())
    sha = run(["rev-parse", "HEAD"], repo)
    data = format_patch(repo, f"{sha}^!")
    run(["checkout", "-q", branch or head], repo)
    return data


def trailers(test: str = "tests/test_x.py::test_fix", status: str = "pending") -> list[str]:
    return [f"Upstream-Status: {status}", "Origin: mcore-rl-stack", f"Test: {test}"]
