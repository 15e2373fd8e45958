"""The two bases of a rebase as commits in the scratch repository.

Git history is preferred (patch-id and ancestry evidence need it): the upstream checkout
lends its objects to the scratch repo, and a ref it lacks is fetched from the submodule URL
(a local mirror through `url.<mirror>.insteadOf` works). When that is impossible, both bases
are release stand-ins: the manifest maps the tag to a PyPI version through `tag_format`, and
the archive becomes a deterministic commit (fixed identity and date, so its id is the same on
every machine). Both bases always come from the same kind of source, so a diff between them
is a real upstream diff.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from ..core.checkout import is_real_clone
from ..core.git import git, git_text, git_timeout, rev
from ..core.manifest import Upstream, short, version_for_tag
from ..errors import PatchToolError
from ..source.detect import probe_url
from ..source.standin import STANDIN_CACHE, STANDIN_IDENTITY, Downloader, pip_download, read_archive
from .engine import Base

AUTO, GIT, STANDIN = "auto", "git", "standin"
MODES = (AUTO, GIT, STANDIN)
FETCH_TIMEOUT_S = 900.0
_SKIP_RE = re.compile(r"(^|/)__pycache__/|\.pyc$|\.egg-info/")


def history_repos(root: Path, up: Upstream) -> list[Path]:
    """The upstream checkout when it is a real clone (never a stand-in repo)."""
    repo = root / up.path
    if not is_real_clone(repo):
        return []
    return [repo]


def _commit(repo: Path, name: str) -> str:
    return rev(repo, f"{name}^{{commit}}")


def _fetch(scratch: Path, url: str, rev: str) -> tuple[str, str]:
    """Fetch `rev` (tag, branch or commit) from `url` into the scratch repo; (sha, why-not)."""
    why = probe_url(url, scratch)
    if why:
        return "", why
    wants = [f"refs/tags/{rev}", rev] if not re.fullmatch(r"[0-9a-f]{40}", rev) else [rev]
    for want in wants:
        code, detail = git_timeout(
            ["fetch", "-q", "--no-tags", url, want], scratch, FETCH_TIMEOUT_S
        )
        if code is None:
            return "", f"fetch of {rev} from {url} timed out after {FETCH_TIMEOUT_S:.0f} s"
        if code == 0:
            return _commit(scratch, "FETCH_HEAD"), ""
        why = detail or f"git fetch exit {code}"
    return "", why


def resolve_git(scratch: Path, repos: list[Path], url: str, rev: str) -> tuple[str, str]:
    """`rev` as a commit reachable from the scratch repo: from a history repo, else fetched."""
    for repo in repos:
        sha = _commit(repo, rev)
        if sha:
            return sha, ""
    return _fetch(scratch, url, rev)


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
    stream = bytearray()
    stream += b"commit refs/patchtool/standin\n"
    ident = f"{STANDIN_IDENTITY['GIT_AUTHOR_NAME']} <{STANDIN_IDENTITY['GIT_AUTHOR_EMAIL']}>"
    stream += f"committer {ident} 946684800 +0000\n".encode()
    message = f"Release stand-in: {standin.package}=={version} ({standin.kind}), not a clone\n"
    stream += f"data {len(message.encode())}\n{message}".encode()
    for rel, (data, executable) in sorted(files.items()):
        mode = "100755" if executable else "100644"
        stream += f"M {mode} inline {rel}\ndata {len(data)}\n".encode() + data + b"\n"
    git(["fast-import", "--quiet", "--force"], scratch, input=bytes(stream))
    return git_text(["rev-parse", "refs/patchtool/standin"], scratch)


def standin_label(up: Upstream, version: str) -> str:
    assert up.standin is not None
    return f"{up.standin.package} {version} stand-in"


def resolve_bases(
    scratch: Path,
    root: Path,
    up: Upstream,
    ref: str,
    *,
    mode: str = AUTO,
    new_commit: str = "",
    downloader: Downloader = pip_download,
) -> tuple[Base, Base, list[Path], str]:
    """(old base, new base, history repos, why stand-ins were used or "").

    `new_commit` names the upstream commit of `ref` when it cannot be read offline.
    """
    if mode not in MODES:
        raise PatchToolError(f"unknown source mode {mode!r}; use one of {', '.join(MODES)}")
    repos = history_repos(root, up)
    why = ""
    if mode in (AUTO, GIT):
        old_sha, why_old = resolve_git(scratch, repos, up.url, up.commit)
        new_sha, why_new = resolve_git(scratch, repos, up.url, ref) if old_sha else ("", "")
        if old_sha and new_sha:
            old = Base(up.tag or short(up.commit), old_sha, True, up.commit, up.tag)
            tag = ref if not re.fullmatch(r"[0-9a-f]{7,40}", ref) else ""
            new = Base(ref if tag else short(new_sha), new_sha, True, new_sha, tag)
            return old, new, repos, ""
        why = (
            f"no git history for {up.commit[:12]}: {why_old}"
            if not old_sha
            else f"cannot resolve {ref}: {why_new}"
        )
        if mode == GIT:
            raise PatchToolError(
                f"{up.name}: {why}; make {up.url} reachable (or a local mirror via "
                f"git config --global url.<mirror>.insteadOf {up.url}) or use --source standin"
            )
    if up.standin is None:
        raise PatchToolError(
            f"{up.name}: {why or 'stand-in requested'} and no release stand-in exists"
        )
    version = version_for_tag(up.standin, ref)
    if not version:
        raise PatchToolError(
            f"{up.name}: {ref!r} is not a release tag of the form {up.standin.tag_format!r}; "
            "offline, only release tags map to a stand-in (give a tag or make the URL reachable)"
        )
    old_commit = materialise_commit(scratch, root, up, up.standin.version, downloader)
    git(["update-ref", "refs/patchtool/old", old_commit], scratch)
    new_commit_sa = materialise_commit(scratch, root, up, version, downloader)
    git(["update-ref", "refs/patchtool/new", new_commit_sa], scratch)
    old = Base(
        standin_label(up, up.standin.version),
        old_commit,
        False,
        up.commit,
        up.tag,
        up.standin.version,
    )
    new = Base(standin_label(up, version), new_commit_sa, False, new_commit, ref, version)
    return old, new, [], why or "stand-ins requested"
