"""Choosing the proxy of a non-release pin: the release whose content is nearest to it.

When a pin is not a release, offline machines can only get a release archive. Which one is
a measurement, not a guess: for every candidate release, count the files under the stand-in's
mapped repository paths (`[<Up>.standin.paths]` values) that differ between the pinned tree
and the release (changed, only in the pin, only in the release). Candidates are the versions
given on the command line, measured against their real PyPI archives (downloaded through the
stand-in cache), or else the release tags in the upstream's history, measured against the tag
trees (release archives match their tags file by file; DESIGN.md). Fewest differing files wins;
ties go to the higher version.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import git_text
from ..model.manifest import Upstream, tag_for_version, version_for_tag
from ..source.standin import STANDIN_CACHE, Downloader, pip_download, read_archive

_SKIP_RE = re.compile(r"(^|/)__pycache__/|\.pyc$|\.egg-info/")
_FINAL_RE = re.compile(r"\d+(\.\d+)*")


@dataclass(frozen=True)
class Distance:
    """How far one release is from the pinned tree, in files under the mapped paths."""

    version: str
    compared_with: str  # "archive <file name>" or "tag <tag>"
    changed: int
    only_pin: int
    only_release: int

    @property
    def total(self) -> int:
        return self.changed + self.only_pin + self.only_release

    def text(self) -> str:
        return (
            f"{self.version}: {self.total} files differ ({self.changed} changed, "
            f"{self.only_pin} only in the pin, {self.only_release} only in the release; "
            f"{self.compared_with})"
        )


def _prefixes(up: Upstream) -> list[str]:
    assert up.standin is not None
    return sorted(set(up.standin.paths.values()))


def _in_scope(path: str, prefixes: list[str]) -> bool:
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in prefixes)


def tree_blobs(repo: Path, rev: str, prefixes: list[str]) -> dict[str, str]:
    """path -> blob id of the regular files of `rev` under `prefixes`."""
    out = git_text(["ls-tree", "-r", "--full-tree", rev], repo)
    blobs: dict[str, str] = {}
    for row in out.splitlines():
        meta, path = row.split("\t", 1)
        mode, kind, sha = meta.split()
        in_scope = _in_scope(path, prefixes) and not _SKIP_RE.search(path)
        if kind == "blob" and mode != "120000" and in_scope:
            blobs[path] = sha
    return blobs


def _blob_id(repo: Path, data: bytes) -> str:
    """The git blob id of `data` in `repo`'s object format (sha1 or sha256)."""
    fmt = git_text(["rev-parse", "--show-object-format"], repo, check=False) or "sha1"
    digest = hashlib.new("sha256" if fmt == "sha256" else "sha1")
    digest.update(b"blob %d\0" % len(data) + data)
    return digest.hexdigest()


def archive_blobs(
    root: Path, up: Upstream, version: str, repo: Path, downloader: Downloader
) -> tuple[dict[str, str], str]:
    """(path -> blob id, archive file name) of the release archive of `version`."""
    assert up.standin is not None
    standin = replace(up.standin, version=version)
    cache = root / STANDIN_CACHE / f"{standin.package}-{version}"
    cache.mkdir(parents=True, exist_ok=True)
    archive = downloader(standin, cache)
    files = read_archive(archive, standin)
    blobs = {p: _blob_id(repo, data) for p, (data, _) in files.items() if not _SKIP_RE.search(p)}
    return blobs, archive.name


def distance(pin: dict[str, str], release: dict[str, str], version: str, how: str) -> Distance:
    changed = sum(1 for p, b in pin.items() if p in release and release[p] != b)
    return Distance(
        version,
        how,
        changed,
        sum(1 for p in pin if p not in release),
        sum(1 for p in release if p not in pin),
    )


def release_tags(tag_repos: list[Path], up: Upstream) -> list[tuple[str, str, str]]:
    """(version, tag, commit) of the final releases (no rc/dev/post) tagged in `tag_repos`."""
    assert up.standin is not None
    found: dict[str, tuple[str, str, str]] = {}
    fmt = "%(refname:short) %(objectname) %(*objectname)"
    for repo in tag_repos:
        out = git_text(["for-each-ref", f"--format={fmt}", "refs/tags/"], repo, check=False)
        for row in out.splitlines():
            tag, sha, *peeled = row.split()
            version = version_for_tag(up.standin, tag)
            if version and _FINAL_RE.fullmatch(version):
                found.setdefault(tag, (version, tag, peeled[0] if peeled else sha))
    return sorted(found.values(), key=lambda t: _version_key(t[0]))


def release_at(tag_repos: list[Path], up: Upstream, commit: str) -> str:
    """The release version whose tag points at `commit` (any release, rc included), or ""."""
    if up.standin is None:
        return ""
    versions = []
    fmt = "%(refname:short) %(objectname) %(*objectname)"
    for repo in tag_repos:
        out = git_text(["for-each-ref", f"--format={fmt}", "refs/tags/"], repo, check=False)
        for row in out.splitlines():
            tag, *shas = row.split()
            version = version_for_tag(up.standin, tag)
            if version and commit in shas:
                versions.append(version)
    return max(versions, key=_version_key) if versions else ""


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def measure(
    root: Path,
    up: Upstream,
    repo: Path,
    commit: str,
    versions: list[str],
    downloader: Downloader = pip_download,
    tag_repos: list[Path] | None = None,
) -> list[Distance]:
    """Distances of `commit` (readable in `repo`) to each candidate, nearest first.

    `versions` given: their archives are measured; none given: the release tags found in
    `tag_repos` (default `repo`), whose commits must be readable in `repo` too.
    """
    if up.standin is None:
        raise PatchToolError(f"[{up.name}] has no stand-in, so it has no proxy to choose")
    prefixes = _prefixes(up)
    pin = tree_blobs(repo, commit, prefixes)
    if not pin:
        raise PatchToolError(
            f"{up.name}@{commit[:12]} has no file under {', '.join(prefixes)} "
            f"([{up.name}.standin.paths]); cannot measure a proxy"
        )
    distances = []
    if versions:
        for version in versions:
            release, name = archive_blobs(root, up, version, repo, downloader)
            distances.append(distance(pin, release, version, f"archive {name}"))
    else:
        for version, tag, sha in release_tags(tag_repos or [repo], up):
            release = tree_blobs(repo, sha, prefixes)
            distances.append(distance(pin, release, version, f"tag {tag}"))
    return sorted(distances, key=lambda d: (d.total, [-x for x in _version_key(d.version)]))


def choose_proxy(
    root: Path,
    up: Upstream,
    repo: Path,
    commit: str,
    versions: list[str],
    downloader: Downloader = pip_download,
    tag_repos: list[Path] | None = None,
) -> tuple[str, str]:
    """(nearest version, basis text for the manifest) for the non-release pin `commit`."""
    distances = measure(root, up, repo, commit, versions, downloader, tag_repos)
    if not distances:
        raise PatchToolError(
            f"{up.name}: no release tag of the form {up.standin.tag_format if up.standin else ''!r} "
            f"in the history to measure {commit[:12]} against; name candidates with "
            f"--proxy {up.name}=X.Y.Z[,X.Y.Z]"
        )
    best = distances[0]
    scope = ", ".join(_prefixes(up))
    others = "; ".join(d.text() for d in distances[1:4])
    basis = f"nearest release to {commit[:12]} by content under {scope}: {best.text()}" + (
        f"; next: {others}" if others else ""
    )
    return best.version, basis


def tag_of(up: Upstream, version: str) -> str:
    assert up.standin is not None
    return tag_for_version(up.standin, version)
