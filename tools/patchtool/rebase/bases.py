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

from ..errors import PatchToolError
from ..git.git import git, git_text, git_timeout, rev
from ..model.manifest import Upstream, short, version_for_tag
from ..source.checkout import is_real_clone
from ..source.detect import probe_url
from ..source.mirror import history_mirror
from ..source.standin import Downloader, materialise_commit, pip_download
from .result import Base

AUTO, GIT, STANDIN = "auto", "git", "standin"
MODES = (AUTO, GIT, STANDIN)
FETCH_TIMEOUT_S = 900.0


def history_repos(root: Path, up: Upstream) -> list[Path]:
    """The upstream checkout when it is a real clone (never a stand-in repo), then this run's
    full-history mirror of it (source/mirror.py), if any."""
    repo = root / up.path
    repos = [repo] if is_real_clone(repo) else []
    mirror = history_mirror(up.name)
    return [*repos, mirror] if mirror is not None else repos


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


_SHA_LIKE = re.compile(r"[0-9a-f]{7,40}")


def _date(scratch: Path, sha: str) -> str:
    return git_text(["log", "-1", "--format=%cI", sha], scratch, check=False)


def resolve_ref(scratch: Path, repos: list[Path], url: str, ref: str) -> tuple[str, str, str, str]:
    """`ref` as the upstream has it now: (commit, upstream tag or "", where from, why-not).

    A commit id is immutable, so a local clone answers as well as the URL (an abbreviated one
    cannot be fetched: git needs the full id). A name (tag, branch, `origin/<branch>`) is asked
    of the URL first (or its insteadOf mirror), never of a possibly years-old remote-tracking
    ref; only when the URL does not have it is the local clone used (a local-only tag is then
    not recorded as the pin's tag).
    """
    if _SHA_LIKE.fullmatch(ref):
        for repo in repos:
            sha = _commit(repo, ref)
            if sha:
                return sha, "", str(repo), ""
        if len(ref) == 40:
            sha, why = _fetch(scratch, url, ref)
            return sha, "", f"{url} (now)" if sha else "", why
        return (
            "",
            "",
            "",
            (
                f"{ref} is an abbreviated commit id and no history containing it is here (git "
                "cannot fetch an abbreviated id); give the full 40-hex commit, or provide the "
                "history first (git submodule update --init <path>)"
            ),
        )
    name = ref
    for prefix in ("refs/remotes/origin/", "origin/", "refs/heads/", "refs/tags/"):
        name = name.removeprefix(prefix)
    why = probe_url(url, scratch)
    if not why:
        for want, is_tag in ((f"refs/tags/{name}", True), (f"refs/heads/{name}", False)):
            code, _ = git_timeout(["fetch", "-q", "--no-tags", url, want], scratch, FETCH_TIMEOUT_S)
            if code is None:
                return "", "", "", f"fetch of {want} from {url} timed out"
            if code == 0:
                return _commit(scratch, "FETCH_HEAD"), name if is_tag else "", f"{url} (now)", ""
        why = f"{url} has no tag or branch {name}"
    for repo in repos:
        sha = _commit(repo, ref)
        if sha:
            return sha, "", f"{repo} (local ref; {why})", ""
    return "", "", "", why


def describe(base: Base, ref: str) -> str:
    """`v2 -> 1a2b3c... (2026-01-02T03:04:05+00:00) from <url> (now)` for the person running it."""
    date = f" ({base.date})" if base.date else ""
    where = f" from {base.resolved_from}" if base.resolved_from else ""
    return f"{ref} -> {base.upstream_commit or base.commit}{date}{where}"


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
        new_sha, tag, where, why_new = (
            resolve_ref(scratch, repos, up.url, ref) if old_sha else ("", "", "", "")
        )
        if old_sha and new_sha:
            old = Base(up.tag or short(up.commit), old_sha, True, up.commit, up.tag)
            old = replace(old, date=_date(scratch, old_sha))
            label = tag or (ref if not _SHA_LIKE.fullmatch(ref) else short(new_sha))
            new = Base(label, new_sha, True, new_sha, tag, "", _date(scratch, new_sha), where)
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
    return _standin_bases(scratch, root, up, ref, mode, new_commit, downloader, why)


def _standin_bases(
    scratch: Path,
    root: Path,
    up: Upstream,
    ref: str,
    mode: str,
    new_commit: str,
    downloader: Downloader,
    why: str,
) -> tuple[Base, Base, list[Path], str]:
    """The bases as release stand-ins (no git history, or --source standin); `why`: why the
    git history could not be used ("" when stand-ins were asked for)."""
    if up.standin is None:
        raise PatchToolError(
            f"{up.name}: {why or 'stand-in requested'} and no release stand-in exists"
        )
    version = version_for_tag(up.standin, ref)
    if not version and why and mode == AUTO:
        raise PatchToolError(
            f"{up.name}: {why}; and {ref!r} is no release tag ({up.standin.tag_format!r}) "
            "a release stand-in could replace"
        )
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
