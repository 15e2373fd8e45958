"""Generated git repositories for the rebase / export / open-pr / pins tests.

Why a helper module: every scenario needs a small upstream with tags and a patch series
made from real commits, exported exactly as the tooling exports them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tools.patchtool.git.git import format_patch

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


def make_superproject(
    root: Path,
    upstream: Path,
    name: str = "Up",
    patches: list[tuple[str, bytes]] | None = None,
    tag: str = "v1",
    standin: str = "",
) -> Path:
    """A superproject: manifest pinning `upstream` at `tag`, a gitlink, a checkout, a series.

    The submodule URL is the local path of `upstream` (plain git reaches it offline).
    """
    sha = run(["rev-parse", f"{tag}^{{commit}}"], upstream)
    root.mkdir(parents=True)
    run(["init", "-q", "-b", "main"], root)
    series_dir = root / "patches" / name
    series_dir.mkdir(parents=True)
    for patch_name, data in patches or []:
        (series_dir / patch_name).write_bytes(data)
    (series_dir / "series").write_text("".join(f"{n}\n" for n, _ in patches or []))
    (root / "patches" / "upstreams.toml").write_text(
        f'[{name}]\npath = "3rdparty/{name}"\nurl = "{upstream}"\ntag = "{tag}"\n'
        f'commit = "{sha}"\ndistribution = "{name.lower()}"\n' + standin
    )
    (root / ".gitmodules").write_text(
        f'[submodule "3rdparty/{name}"]\n\tpath = 3rdparty/{name}\n\turl = {upstream}\n'
    )
    checkout = root / "3rdparty" / name
    run(["clone", "-q", "--no-checkout", str(upstream), str(checkout)], root)
    run(["checkout", "-q", "--detach", sha], checkout)
    run(["add", ".gitmodules", "patches"], root)
    run(["update-index", "--add", "--cacheinfo", f"160000,{sha},3rdparty/{name}"], root)
    run(["commit", "-q", "-m", "superproject"], root)
    return root


def nest(repo: Path, path: str, url: Path, sha: str, message: str) -> str:
    """Commit `.gitmodules` + a gitlink at `path` -> `sha` (sha need not exist)."""
    (repo / ".gitmodules").write_text(f'[submodule "x"]\n\tpath = {path}\n\turl = {url}\n')
    run(["add", ".gitmodules"], repo)
    run(["update-index", "--add", "--cacheinfo", f"160000,{sha},{path}"], repo)
    run(["commit", "-q", "-m", message], repo)
    return run(["rev-parse", "HEAD"], repo)


def tree_state(root: Path) -> dict[str, bytes]:
    """Every file under patches/ plus the index's gitlinks: what a failed rebase must not change."""
    state = {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in (root / "patches").rglob("*")
        if p.is_file()
    }
    state["<index>"] = run(["ls-files", "-s"], root).encode()
    state["<.gitmodules>"] = (root / ".gitmodules").read_bytes()
    return state


def isolate_git(monkeypatch: object, tmp_path: Path) -> None:
    """Make the tool's own git calls ignore the machine's global config (mirrors, user prefs)."""
    config = tmp_path / "isolated.gitconfig"
    config.write_text("")
    setenv = monkeypatch.setenv  # type: ignore[attr-defined]
    setenv("GIT_CONFIG_GLOBAL", str(config))
    setenv("GIT_CONFIG_NOSYSTEM", "1")
    # Nor a mirror directory the caller runs with (.ci/run exports one for the real upstreams).
    monkeypatch.delenv("PATCHTOOL_MIRROR_DIR", raising=False)  # type: ignore[attr-defined]
