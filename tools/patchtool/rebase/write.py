"""Write a conflict-free rebase back: re-exported patches, retired patches, series, pin.

Kept separate from the engine so `rebase` and `pin --follow` write identically, and so a
conflict (or --dry-run) provably never reaches this code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import format_patch, git
from ..model.manifest import MANIFEST_PATH, Upstream, set_pin, short, version_for_tag
from ..model.series import RETIRED_DIR, SERIES_FILE
from ..model.trailers import EVIDENCE_KEY, STATUS_KEY, set_patch_trailer
from ..source.nearest import release_at, tag_of
from .result import UPSTREAMED, PatchResult, RebaseResult


@dataclass
class Written:
    files: list[str] = field(default_factory=list)  # paths relative to the root
    removed: list[str] = field(default_factory=list)
    gitlink: str = ""


def accepted_status(res: PatchResult, result: RebaseResult) -> tuple[str, str]:
    """(`accepted <commit or tag>`, evidence line) for a retired patch.

    The status names the most specific thing found: the identical upstream commit, the
    recorded accepted commit, the commit that merged the patch's PR, or else the new base itself
    (tag, or commit id).
    """
    new = result.new
    where = new.tag or short(new.upstream_commit) or new.label
    token = where
    for ev in res.evidence:
        if ev.kind == "patch-id" and ev.commit:
            token = ev.commit[:12]
            break
        if ev.kind in ("accepted", "pr-merged") and ev.commit:
            token = ev.commit[:12] if ev.kind == "pr-merged" else ev.commit
            break
    kinds = ", ".join(f"{e.kind} ({e.detail})" for e in res.evidence)
    return f"accepted {token}", f"{kinds}; found by tools/patches rebase onto {where}"


def rewrite_series_text(text: str, drop: set[str]) -> str:
    """The series file without the `drop` names; comments and order kept."""
    out = []
    for line in text.splitlines(keepends=True):
        name = line.split("#", 1)[0].strip()
        if name and name in drop:
            continue
        out.append(line)
    return "".join(out)


def write_rebase(
    root: Path,
    up: Upstream,
    result: RebaseResult,
    *,
    new_commit: str,
    new_tag: str,
    standin: StandinMove | None = None,
) -> Written:
    """Apply a conflict-free `result` to the superproject (files, index gitlink, manifest)."""
    if result.conflicts:
        raise PatchToolError(f"{up.name}: refusing to write a rebase with conflicts")
    if not new_commit:
        raise PatchToolError(
            f"{up.name}: the upstream commit of {result.new.label} is unknown offline; "
            "pass --commit <full sha> (from the release page) or make the URL reachable"
        )
    written = Written()
    series_dir = root / up.series_dir
    scratch = Path(result.scratch)
    rel = lambda p: p.relative_to(root).as_posix()  # noqa: E731
    for res in result.kept:
        path = series_dir / res.name
        data = format_patch(scratch, f"{res.new_commit}^!")
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
            written.files.append(rel(path))
    retired = series_dir / RETIRED_DIR
    for res in result.patches:
        if res.classification != UPSTREAMED:
            continue
        source = series_dir / res.name
        status, evidence = accepted_status(res, result)
        data = set_patch_trailer(source.read_bytes(), STATUS_KEY, status, source)
        data = set_patch_trailer(data, EVIDENCE_KEY, evidence, source)
        retired.mkdir(exist_ok=True)
        target = retired / res.name
        target.write_bytes(data)
        source.unlink()
        written.files.append(rel(target))
        written.removed.append(rel(source))
    series = series_dir / SERIES_FILE
    text = series.read_text(encoding="utf-8")
    new_text = rewrite_series_text(text, {r.name for r in result.upstreamed})
    if new_text != text:
        series.write_text(new_text, encoding="utf-8")
        written.files.append(rel(series))
    if standin is None and up.standin is not None:
        standin = release_standin(up, new_commit, new_tag, [scratch])
    move_pin(root, up, new_commit, new_tag, standin)
    written.gitlink = new_commit
    written.files.append(MANIFEST_PATH.as_posix())
    return written


@dataclass(frozen=True)
class StandinMove:
    """The stand-in fields an upstream gets with its new pin."""

    version: str
    proxy: bool
    basis: str
    tag: str  # the release tag when the new pin is a release (also when given as a commit)

    def text(self, up: Upstream) -> str:
        assert up.standin is not None
        if not self.proxy:
            return f"{up.standin.package} {self.version}: the release itself (proxy = false)"
        return f"{up.standin.package} {self.version} as PROXY (proxy = true): {self.basis}"


def release_standin(
    up: Upstream, commit: str, tag: str, tag_repos: list[Path]
) -> StandinMove | None:
    """The stand-in fields when the new pin is a release (by tag, or a release tag at `commit`)."""
    if up.standin is None:
        return None
    version = (version_for_tag(up.standin, tag) if tag else "") or release_at(tag_repos, up, commit)
    if not version:
        return None
    return StandinMove(
        version, False, "", tag if version_for_tag(up.standin, tag) else tag_of(up, version)
    )


def unmeasured_proxy(up: Upstream, commit: str) -> StandinMove:
    """A non-release pin moved without measuring: the old stand-in kept as a proxy, saying so.

    `rebase` does not download releases to measure the nearest one (`pin` does); the basis
    says how to measure it, and lint accepts the fields (they no longer claim to be the pin).
    """
    assert up.standin is not None
    version = up.standin.version
    basis = (
        f"not measured: {version} kept when tools/patches rebase moved the pin to "
        f"{short(commit)}; measure the nearest release with tools/patches pin {up.name} {commit}"
    )
    return StandinMove(version, True, basis, "")


def move_pin(
    root: Path, up: Upstream, commit: str, tag: str, standin: StandinMove | None = None
) -> None:
    """The one writer of a pin: index gitlink, manifest tag/commit and every stand-in field.

    `rebase` and `pin` both come here, so the stand-in fields always match the pin: a release
    is its own stand-in (`proxy = false`, no basis); any other commit gets `standin` as given
    (a measured proxy from `pin`), else the old release kept as an unmeasured proxy.
    .gitmodules is untouched.
    """
    if up.standin is not None and standin is None:
        standin = release_standin(up, commit, tag, []) or unmeasured_proxy(up, commit)
    if standin is not None and standin.tag:
        tag = standin.tag
    git(["update-index", "--cacheinfo", f"160000,{commit},{up.path}"], root)
    path = root / MANIFEST_PATH
    text = path.read_text(encoding="utf-8")
    if standin is None:
        text = set_pin(text, up.name, tag=tag, commit=commit)
    else:
        text = set_pin(
            text,
            up.name,
            tag=tag,
            commit=commit,
            version=standin.version,
            proxy=standin.proxy,
            basis=standin.basis,
        )
    path.write_text(text, encoding="utf-8")
