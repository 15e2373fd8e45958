"""Nested wiring: an upstream's own `[tool.uv.sources]` paths made to reach our patched checkouts.

NeMo-RL's `uv sync` (run inside `3rdparty/NeMo-RL`, where its users run it) builds
megatron-bridge from its nested submodule path `3rdparty/Megatron-Bridge-workspace/
Megatron-Bridge` and megatron-core from that Bridge's own nested `3rdparty/Megatron-LM`: not
from our patched checkouts. A uv override at our root cannot reach that run (uv reads
NeMo-RL's own pyproject there), so the nested paths themselves are made relative symlinks to
our checkouts (`3rdparty/NeMo-RL/3rdparty/Megatron-Bridge-workspace/Megatron-Bridge ->
../../../Megatron-Bridge`).

Which paths: a link (host, path, target) for every `[tool.uv.sources]` path of a host
checkout whose package is another upstream's `distribution` (the manifest names them). A
release stand-in has no pyproject.toml; where such a stand-in is a link's target, the paths
nested in it are read from the host's uv.lock (the editable sources under the link's path).

Git never sees the links as changes: a nested path that is a gitlink in the host's index gets
`skip-worktree` (without it `git status` in the host fails: "expected submodule path ... not to
be a symbolic link"); its recorded commit is never touched, so check-pins is unchanged. A path
the host does not track (inside a stand-in) gets a line in the host's `info/exclude`. Each link
is recorded in the host's config (`checkout.WIRED_KEY`) and `unwire` removes exactly those.

Nothing of a user's is ever removed: a nested path holding an initialised checkout, files, or
a link elsewhere is refused (naming the path and the fix) before anything changes; only an
empty directory (an uninitialised submodule) is replaced.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import git, git_text
from ..model.manifest import Manifest, Upstream
from .checkout import WIRED_FETCH_KEY, WIRED_KEY, checkout_dir, is_repo, standin_spec
from .nested_plan import Link, host_links, uv_path_sources

# The states of one link (its `state` in status --json).
WIRED = "wired"  # the nested path is a link resolving to our checkout
UNWIRED = "not wired"  # absent or an empty directory: apply will link it
BLOCKED = "blocked"  # holds a checkout or files: apply refuses, naming the fix
FOREIGN = "foreign link"  # a link to somewhere else: apply refuses
NO_TARGET = "no target"  # our checkout of the target is absent: nothing to link to

_EXCLUDE_MARK = "# tools/patches nested wiring"


@dataclass
class LinkState:
    """A link as it is on disk now; `recorded` is the host's gitlink commit at the path."""

    link: Link
    state: str
    detail: str
    recorded: str = ""
    note: str = ""
    made: bool = False  # wire_host linked it in this run
    hidden: bool = False  # git status does not see it (skip-worktree or an exclude line)

    def as_dict(self) -> dict[str, str]:
        row = asdict(self.link)
        row.update(state=self.state, detail=self.detail, recorded=self.recorded, note=self.note)
        return row

    def line(self) -> str:
        return link_line(self.as_dict())


def link_line(row: dict[str, str], *, origin: bool = False) -> str:
    """One human line of a link row (`LinkState.as_dict()`): path, target, state, detail, the
    gitlink it keeps, where the path was read (`origin`), and the note."""
    text = f"{row['path']} -> our {row['target']} ({row['distribution']}): {row['state']}"
    text += f"; {row['detail']}" if row["detail"] else ""
    text += f" [gitlink {row['recorded'][:12]} kept]" if row["recorded"] else ""
    text += f"; from {row['origin']}" if origin else ""
    return text + (f"; NOTE: {row['note']}" if row["note"] else "")


def _index_entry(repo: Path, path: str) -> tuple[str, str, bool]:
    """(mode, object, skip-worktree) of `path` in `repo`'s index; mode "tree" if only paths
    below it are tracked, "" if nothing is."""
    out = git_text(["ls-files", "-s", "-v", "--", path], repo)
    for row in out.splitlines():
        meta, name = row.split("\t", 1)
        tag, mode, sha = meta.split()[:3]
        if name == path:
            return mode, sha, tag == "S"
        return "tree", "", False
    return "", "", False


def _nested_work(nested: Path) -> str:
    """What an initialised nested checkout holds (its uncommitted changes), for the refusal."""
    out = git(["status", "--porcelain=v1", "--untracked-files=normal"], nested, check=False)
    dirty = [line[3:] for line in out.splitlines() if line.strip()]
    if not dirty:
        return "a checkout (no uncommitted changes, but its branches and stashes are its own)"
    listed = ", ".join(dirty[:10]) + (" ..." if len(dirty) > 10 else "")
    return f"a checkout with uncommitted changes ({listed})"


def inspect(root: Path, manifest: Manifest, link: Link) -> LinkState:
    """The link's state on disk; reads only."""
    host = manifest.upstreams[link.host]
    target = manifest.upstreams[link.target]
    host_repo = checkout_dir(root, host)
    target_repo = checkout_dir(root, target)
    nested = host_repo / link.path
    shown = f"{host.path}/{link.path}"
    mode, sha, skipped = _index_entry(host_repo, link.path)
    state = LinkState(link, UNWIRED, "", sha if mode == "160000" else "")
    state.hidden = skipped if mode == "160000" else _is_excluded(host_repo, link.path)
    if not is_repo(target_repo):
        state.state, state.detail = NO_TARGET, f"our {target.path} is absent: nothing to link to"
        return state
    spec = standin_spec(target_repo) if uv_path_sources(target_repo) is None else ""
    if spec:
        state.note = (
            f"{target.path} is a release stand-in ({spec}) without pyproject.toml: uv cannot "
            f"build {link.distribution} from it; a clone of the pin is needed for a real build"
        )
    if nested.is_symlink():
        if os.path.realpath(nested) == os.path.realpath(target_repo):
            state.state, state.detail = WIRED, f"{shown} -> {os.readlink(nested)}"
        else:
            state.state = FOREIGN
            state.detail = (
                f"{shown} is a link to {os.readlink(nested)}, not to our {target.path}: remove it "
                f"(rm {shown}) and re-run tools/patches apply"
            )
        return state
    if not nested.exists():
        state.detail = f"{shown} absent"
    elif nested.is_dir() and not any(nested.iterdir()):
        state.detail = f"{shown} is an empty directory (an uninitialised submodule)"
    elif (nested / ".git").exists():
        state.state = BLOCKED
        state.detail = (
            f"{shown} holds {_nested_work(nested)}; the wiring would replace it with a link to "
            f"our {target.path}. Keep your work (commit and push it), then `git -C {host.path} "
            f"submodule deinit {link.path}` (its history stays in the host's .git/modules), "
            f"or move it away (mv {shown} <somewhere>); then re-run tools/patches apply"
        )
    else:
        state.state = BLOCKED
        state.detail = (
            f"{shown} holds files that are not a checkout; the wiring would replace it with a "
            f"link to our {target.path}: move them away (mv {shown} <somewhere>), then re-run "
            "tools/patches apply"
        )
    if mode and mode != "160000":
        state.state = BLOCKED
        state.detail = (
            f"{shown} is tracked content of {host.name} (mode {mode}), not a submodule path: "
            f"the wiring does not replace upstream files; check {link.origin}"
        )
    return state


def _exclude_file(repo: Path) -> Path:
    path = Path(git_text(["rev-parse", "--git-path", "info/exclude"], repo))
    return path if path.is_absolute() else repo / path


def _exclude_lines(path: str) -> list[str]:
    """The two `info/exclude` lines of one link: a comment saying whose, then the pattern
    (gitignore has no trailing comments)."""
    return [f"{_EXCLUDE_MARK}: {path}", f"/{path}"]


def _is_excluded(repo: Path, path: str) -> bool:
    exclude = _exclude_file(repo)
    return exclude.exists() and _exclude_lines(path)[0] in exclude.read_text("utf-8").splitlines()


def _set_excluded(repo: Path, path: str, excluded: bool) -> None:
    """Add or remove the `info/exclude` lines hiding an untracked link from `git status`."""
    if _is_excluded(repo, path) == excluded:
        return
    exclude = _exclude_file(repo)
    lines = exclude.read_text(encoding="utf-8").splitlines() if exclude.exists() else []
    mark, pattern = _exclude_lines(path)
    if excluded:
        lines += [mark, pattern]
    else:
        at = lines.index(mark)
        del lines[at : at + (2 if lines[at + 1 : at + 2] == [pattern] else 1)]
    exclude.parent.mkdir(parents=True, exist_ok=True)
    exclude.write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")


def recorded_links(repo: Path) -> list[str]:
    """The nested paths `wire` linked in this host checkout (its config)."""
    out = git_text(["config", "--get-all", WIRED_KEY], repo, check=False)
    return [line for line in out.splitlines() if line]


def _make_link(root: Path, manifest: Manifest, link: Link, gitlink: str) -> None:
    """Record, then link (replacing the empty directory), then hide it from git status."""
    host_repo = checkout_dir(root, manifest.upstreams[link.host])
    target_repo = checkout_dir(root, manifest.upstreams[link.target])
    nested = host_repo / link.path
    if link.path not in recorded_links(host_repo):
        git(["config", "--add", WIRED_KEY, link.path], host_repo)
    if nested.is_dir() and not nested.is_symlink():
        nested.rmdir()  # empty: inspect() said so
    nested.parent.mkdir(parents=True, exist_ok=True)
    nested.symlink_to(os.path.relpath(target_repo, nested.parent), target_is_directory=True)
    _hide(host_repo, link.path, bool(gitlink))


def _hide(repo: Path, path: str, gitlink: bool) -> None:
    """Make the link invisible to git; for a submodule path also keep fetch out of it."""
    if gitlink:
        git(["update-index", "--skip-worktree", "--", path], repo)
        _stop_fetch_recursion(repo)
    else:
        _set_excluded(repo, path, True)


_UNSET = "<unset>"


def _stop_fetch_recursion(repo: Path) -> None:
    """`fetch.recurseSubmodules=false` in the host while wired, the previous value saved:
    git fetch (also the one `git submodule update` runs when a pin moves) otherwise fails
    with "expected submodule path ... not to be a symbolic link"."""
    if git_text(["config", "--local", "--get", WIRED_FETCH_KEY], repo, check=False):
        return
    old = git_text(["config", "--local", "--get", "fetch.recurseSubmodules"], repo, check=False)
    git(["config", "--local", WIRED_FETCH_KEY, old or _UNSET], repo)
    git(["config", "--local", "fetch.recurseSubmodules", "false"], repo)


def _restore_fetch_recursion(repo: Path) -> None:
    saved = git_text(["config", "--local", "--get", WIRED_FETCH_KEY], repo, check=False)
    if not saved:
        return
    if saved == _UNSET:
        git(["config", "--local", "--unset", "fetch.recurseSubmodules"], repo, check=False)
    else:
        git(["config", "--local", "fetch.recurseSubmodules", saved], repo)
    git(["config", "--local", "--unset", WIRED_FETCH_KEY], repo)


def refuse_blocked(root: Path, manifest: Manifest, host: Upstream) -> None:
    """apply's first step for `host`: refuse before the series step if a nested path holds a
    checkout, files or a foreign link (a dirty nested checkout would otherwise be reported
    only as a modified path of the host). Reads the file system only, unless one is suspect."""
    host_repo = checkout_dir(root, host)
    if not is_repo(host_repo):
        return
    for link in host_links(root, manifest, host):
        nested = host_repo / link.path
        target = checkout_dir(root, manifest.upstreams[link.target])
        if nested.is_symlink() and os.path.realpath(nested) == os.path.realpath(target):
            continue
        if not nested.exists() or (nested.is_dir() and not any(nested.iterdir())):
            continue
        state = inspect(root, manifest, link)
        if state.state in (BLOCKED, FOREIGN):
            raise PatchToolError(f"{state.detail} (nothing was changed)")


def wire_host(root: Path, manifest: Manifest, host: Upstream) -> list[LinkState]:
    """Link every nested path of `host` to our checkout; all or nothing, idempotent.

    Refuses (PatchToolError, nothing changed) if any nested path holds a checkout, files or a
    foreign link. Links whose target checkout is absent are reported, not made.
    """
    host_repo = checkout_dir(root, host)
    if not is_repo(host_repo):
        return []
    states = [inspect(root, manifest, link) for link in host_links(root, manifest, host)]
    refused = [s for s in states if s.state in (BLOCKED, FOREIGN)]
    if refused:
        raise PatchToolError("; ".join(s.detail for s in refused) + " (nothing was changed)")
    # A hidden link was recorded before it was made (_make_link): only a repair reads config.
    repair = any(s.state == WIRED and not s.hidden for s in states)
    recorded = recorded_links(host_repo) if repair else []
    for state in states:
        if state.state == UNWIRED:
            _make_link(root, manifest, state.link, state.recorded)
            state.state, state.made, state.hidden = WIRED, True, True
            link = host_repo / state.link.path
            state.detail = f"{host.path}/{state.link.path} -> {os.readlink(link)}"
        elif state.state == WIRED and not state.hidden:
            # Kept invisible and recorded even if the host's index was rebuilt meanwhile.
            _hide(host_repo, state.link.path, bool(state.recorded))
            if state.link.path not in recorded:
                git(["config", "--add", WIRED_KEY, state.link.path], host_repo)
    return states


def unwire_host(root: Path, manifest: Manifest, host: Upstream) -> list[str]:
    """Remove every link `wire_host` made in `host` (and any planned link resolving to our
    checkout): the nested path is again what git checks out (an empty directory for a
    submodule), skip-worktree and exclude lines cleared. Returns the paths unwired."""
    host_repo = checkout_dir(root, host)
    if not is_repo(host_repo):
        return []
    paths = recorded_links(host_repo)
    for link in host_links(root, manifest, host):
        target = checkout_dir(root, manifest.upstreams[link.target])
        nested = host_repo / link.path
        linked = nested.is_symlink() and os.path.realpath(nested) == os.path.realpath(target)
        if linked and link.path not in paths:
            paths.append(link.path)
    ours = {os.path.realpath(checkout_dir(root, up)) for up in manifest.upstreams.values()}
    done: list[str] = []
    for path in paths:
        nested = host_repo / path
        mode, _, skipped = _index_entry(host_repo, path)
        if nested.is_symlink() and os.path.realpath(nested) in ours:  # never a link of yours
            nested.unlink()
            done.append(path)
        if mode == "160000":
            if not nested.exists() and not nested.is_symlink():
                nested.mkdir(parents=True)  # what git leaves for an uninitialised submodule
            if skipped:
                git(["update-index", "--no-skip-worktree", "--", path], host_repo)
        else:
            _set_excluded(host_repo, path, False)
            _prune_empty_parents(host_repo, nested.parent)
        git(["config", "--fixed-value", "--unset-all", WIRED_KEY, path], host_repo, check=False)
    if paths:
        _restore_fetch_recursion(host_repo)
    return done


def _prune_empty_parents(repo: Path, folder: Path) -> None:
    """Remove the directories a link inside an untracked path needed, up to the checkout."""
    while folder != repo and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


def wiring_status(root: Path, manifest: Manifest, up: Upstream) -> dict[str, object]:
    """What `status` shows of `up`'s nested wiring: applicable, a note, one row per link."""
    repo = checkout_dir(root, up)
    if not is_repo(repo):
        return {"applicable": False, "note": f"not applicable: {up.path} absent", "links": []}
    states = [inspect(root, manifest, link) for link in host_links(root, manifest, up)]
    wired = sum(1 for s in states if s.state == WIRED)
    if uv_path_sources(repo) is None:
        note = "no pyproject.toml here (its [tool.uv.sources] are unknown)"
        if states:
            note += f"; nested paths from the host's uv.lock: {wired}/{len(states)} linked"
    elif not states:
        note = "none: no [tool.uv.sources] path here names another upstream"
    else:
        note = f"{wired}/{len(states)} nested paths linked to our checkouts"
    if wired < len(states):
        note += ": run tools/patches apply"
    return {"applicable": bool(states), "note": note, "links": [s.as_dict() for s in states]}
