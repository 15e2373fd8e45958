"""`pin`: move pins with the rebase machinery, one upstream by hand or the whole chain.

`pin --follow NeMo-RL [REF]` pins NeMo-RL at REF (default: its current pin), reads the Bridge
gitlink in that NeMo-RL commit and the Megatron-LM gitlink in that Bridge commit, and moves
our Bridge and Megatron-LM pins there. Every moved upstream's series is replayed and
classified exactly like `rebase`; it is all or nothing: any conflict (or any link of the
chain that cannot be read) changes nothing outside the scratch directories. Afterwards
`check-pins` is clean by construction. `pin UPSTREAM REF` moves one upstream and reports the
incoherence it creates.

Every moved upstream with a stand-in gets its offline stand-in fields set too: a release tag
(given by name, or a commit a release tag points at) is its own stand-in (`proxy = false`);
any other commit gets the nearest release as a proxy (`proxy = true`, `proxy_basis` records
the measurement; tools/patchtool/source/nearest.py). `--proxy [NAME=]X.Y.Z[,X.Y.Z]` names candidate
releases, measured against their real archives; without it the release tags in the history
are measured.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import PatchToolError
from ..model.manifest import (
    MANIFEST_PATH,
    Manifest,
    Upstream,
    load_manifest,
    short,
    version_for_tag,
)
from ..source.nearest import choose_proxy, release_at, tag_of
from ..source.pin_check import (
    nested_gitlinks,
    norm_url,
)
from ..source.standin import Downloader, pip_download
from .bases import GIT, history_repos, resolve_bases, resolve_git
from .engine import TripwireHook, rebase_series
from .flow import finish, read_patches
from .report import markdown
from .result import RebaseResult
from .scratch import create_scratch, remove_scratch
from .write import StandinMove, move_pin


@dataclass
class Move:
    """One upstream to move: where to, and why (the chain link that named the commit)."""

    upstream: Upstream
    ref: str
    commit: str
    reason: str


def _lookup(scratch_root: Path, root: Path, up: Upstream, ref: str) -> str:
    """`ref` as a full commit of `up` (its checkout, else fetched); actionable error if not."""
    probe = scratch_root / f"probe-{up.name}"
    create_scratch(probe, history_repos(root, up))
    sha, why = resolve_git(probe, history_repos(root, up), up.url, ref)
    if not sha:
        raise PatchToolError(
            f"{up.name}: cannot find {ref} ({why or 'not in the local history'}); provide the "
            f"history (git submodule update --init {up.path}, or a mirror via git config "
            f"--global url.<mirror>.insteadOf {up.url}); nothing was changed"
        )
    return sha


def _nested(scratch_root: Path, root: Path, holder: Upstream, commit: str, target: Upstream) -> str:
    """The gitlink `holder`@`commit` records for `target` (matched by URL)."""
    probe = scratch_root / f"probe-{holder.name}"
    links = nested_gitlinks(probe, commit)
    hit = links.get(norm_url(target.url))
    if hit is None:
        known = ", ".join(f"{p} ({u})" for u, (p, _) in sorted(links.items())) or "none"
        raise PatchToolError(
            f"{holder.name}@{short(commit)} has no submodule for {target.url} in its "
            f".gitmodules/tree (submodules there: {known}); cannot follow the chain; nothing "
            "was changed"
        )
    return hit[1]


def follow_chain(
    root: Path, manifest: Manifest, top: str, ref: str, scratch_root: Path
) -> list[Move]:
    """[top, its nested pin, that one's nested pin, ...] following our upstreams by URL."""
    ups = manifest.upstreams
    if top not in ups:
        raise PatchToolError(f"unknown upstream {top}; known: {', '.join(ups)}")
    moves = [
        Move(ups[top], ref, _lookup(scratch_root, root, ups[top], ref), f"--follow {top} {ref}")
    ]
    seen = {top}
    while True:
        holder = moves[-1]
        probe = scratch_root / f"probe-{holder.upstream.name}"
        links = nested_gitlinks(probe, holder.commit)
        nxt = next(
            (u for u in ups.values() if u.name not in seen and norm_url(u.url) in links), None
        )
        if nxt is None:
            missing = [u for u in ups.values() if u.name not in seen]
            if missing:
                names = ", ".join(f"{u.name} ({u.url})" for u in missing)
                raise PatchToolError(
                    f"{holder.upstream.name}@{short(holder.commit)} nests none of {names} "
                    f"(its submodules: {', '.join(sorted(links)) or 'none'}); the chain from "
                    f"{top} cannot pin them; nothing was changed"
                )
            break
        sha = _nested(scratch_root, root, holder.upstream, holder.commit, nxt)
        _lookup(scratch_root, root, nxt, sha)
        moves.append(
            Move(nxt, sha, sha, f"nested in {holder.upstream.name}@{short(holder.commit)}")
        )
        seen.add(nxt.name)
    return moves


@dataclass
class Planned:
    move: Move
    result: RebaseResult | None  # None: already at that pin
    scratch: Path | None
    standin: StandinMove | None = None


def plan_standin(
    root: Path, p: Planned, candidates: list[str], downloader: Downloader
) -> StandinMove | None:
    """Release -> its own stand-in; other commit -> nearest release as proxy (measured).

    An upstream already at its pin (e.g. moved by `rebase`, which does not choose proxies)
    gets its stand-in fields checked too; None when there is nothing to change.
    """
    up = p.move.upstream
    if up.standin is None:
        return None
    repos = history_repos(root, up)
    if p.result is None:
        if not repos:
            return None
        work, tag = repos[0], up.tag
    else:
        assert p.scratch is not None
        work, tag = p.scratch, p.result.new.tag
    tag_repos = [*repos, work]
    version = version_for_tag(up.standin, tag) if tag else ""
    version = version or release_at(tag_repos, up, p.move.commit)
    # Already pinned: only an inconsistent stand-in is fixed; a chosen proxy is kept.
    consistent = (up.standin.version, up.standin.proxy) == (version, False) or (
        not version and up.standin.proxy
    )
    if p.result is None and not candidates and consistent:
        return None
    if version:
        return StandinMove(version, False, "", tag or tag_of(up, version))
    version, basis = choose_proxy(root, up, work, p.move.commit, candidates, downloader, tag_repos)
    return StandinMove(version, True, basis, "")


def parse_proxies(values: list[str], default: str) -> dict[str, list[str]]:
    """`--proxy [NAME=]X.Y.Z[,X.Y.Z]` values -> {upstream: [versions]}."""
    out: dict[str, list[str]] = {}
    for value in values:
        name, _, versions = value.rpartition("=")
        out.setdefault(name or default, []).extend(v for v in versions.split(",") if v)
    return out


def plan(
    root: Path,
    moves: list[Move],
    tripwire: TripwireHook | None,
    *,
    replay_unmoved: bool = False,
    tripwire_for: Callable[[Upstream], TripwireHook | None] | None = None,
) -> list[Planned]:
    """Replay every moved series (nothing outside scratch dirs is touched).

    `replay_unmoved` replays a series whose upstream stays at its pin too (`roll` gives every
    patch a verdict); `tripwire_for` picks the hook per upstream (else `tripwire` for all).
    """
    planned: list[Planned] = []
    try:
        for move in moves:
            planned.append(_replay(root, move, replay_unmoved, tripwire_for, tripwire))
    except BaseException:  # an error or Ctrl-C: no scratch directory is left behind
        for p in planned:
            if p.scratch is not None:
                remove_scratch(p.scratch)
        raise
    return planned


def _replay(
    root: Path,
    move: Move,
    replay_unmoved: bool,
    tripwire_for: Callable[[Upstream], TripwireHook | None] | None,
    tripwire: TripwireHook | None,
) -> Planned:
    """One series replayed on `move`'s commit in a new scratch directory (removed on failure)."""
    up = move.upstream
    if move.commit == up.commit and not replay_unmoved:
        return Planned(move, None, None)
    hook = tripwire_for(up) if tripwire_for is not None else tripwire
    scratch = Path(tempfile.mkdtemp(prefix=f"patches-pin-{up.name}-"))
    try:
        create_scratch(scratch, history_repos(root, up))
        old, new, repos, _ = resolve_bases(scratch, root, up, move.ref, mode=GIT)
        result = rebase_series(
            up.name, read_patches(root, up), old, new, scratch,
            history_repos=repos, tripwire=hook,
        )  # fmt: skip
    except BaseException:
        remove_scratch(scratch)
        raise
    return Planned(move, result, scratch)


def run_pin(
    root: Path,
    upstream: str,
    ref: str,
    *,
    follow: bool,
    dry_run: bool = False,
    tripwire: TripwireHook | None = None,
    proxies: dict[str, list[str]] | None = None,
    downloader: Downloader = pip_download,
) -> tuple[list[Planned], list[str]]:
    """The `pin` command as a function: (per-upstream plans, files written)."""
    manifest = load_manifest(root)
    proxies = proxies or {}
    _check_names(manifest, upstream, proxies)
    ref = ref or manifest.upstreams[upstream].commit
    with tempfile.TemporaryDirectory(prefix="patches-pin-probe-") as tmp:
        if follow:
            moves = follow_chain(root, manifest, upstream, ref, Path(tmp))
        else:
            up = manifest.upstreams[upstream]
            moves = [Move(up, ref, _lookup(Path(tmp), root, up, ref), f"pin {upstream} {ref}")]
    planned = plan(root, moves, tripwire)
    conflicts = [p for p in planned if p.result is not None and p.result.conflicts]
    try:
        # Before anything is written: a proxy that cannot be chosen changes nothing.
        for p in planned:
            cands = proxies.get(p.move.upstream.name, [])
            p.standin = plan_standin(root, p, cands, downloader)
    except PatchToolError:
        for p in planned:
            if p.scratch is not None:
                remove_scratch(p.scratch)
        raise
    written: list[str] = []
    for p in planned:
        if p.result is None:
            if p.standin is not None and not conflicts and not dry_run:
                up = p.move.upstream
                set_standin(root, up, p.move.commit, p.standin.tag or up.tag, p.standin)
                written.append(MANIFEST_PATH.as_posix())
            continue
        up = p.move.upstream
        command = ["tools/patches", "pin", *(["--follow"] if follow else []), upstream, ref]
        command += [f"--proxy={n}={','.join(v)}" for n, v in proxies.items()]
        text = markdown(p.result, command, "")
        standin = p.standin
        if standin is not None:
            text += f"\n## Offline stand-in\n\n{standin.text(up)}\n"
        tag = standin.tag if standin and standin.tag else p.result.new.tag
        assert p.scratch is not None
        _, files = finish(
            root, up, p.result, p.scratch, text,
            hold=bool(conflicts) or dry_run,
            new_commit=p.move.commit,
            new_tag=tag,
            standin=standin,
        )  # fmt: skip
        written += files
    return planned, written


def _check_names(manifest: Manifest, upstream: str, proxies: dict[str, list[str]]) -> None:
    """The upstream and every --proxy upstream must be in the manifest."""
    if upstream not in manifest.upstreams:
        raise PatchToolError(f"unknown upstream {upstream}; known: {', '.join(manifest.upstreams)}")
    unknown = sorted(set(proxies) - set(manifest.upstreams))
    if unknown:
        raise PatchToolError(
            f"--proxy names unknown upstream {', '.join(unknown)}; known: "
            f"{', '.join(manifest.upstreams)}"
        )


def set_standin(root: Path, up: Upstream, commit: str, tag: str, move: StandinMove) -> None:
    """Write the stand-in fields of the (unchanged) pin: the one pin writer, write.move_pin."""
    move_pin(root, up, commit, tag, move)
