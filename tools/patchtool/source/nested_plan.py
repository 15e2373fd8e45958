"""Which nested links the checkouts call for (see nested_wiring.py for why and how they are
made): a link for every `[tool.uv.sources]` path of a host checkout whose package is another
upstream's `distribution`, and, where a release stand-in (no pyproject.toml) is a link's
target, the paths nested in it as the host's uv.lock records them.

Why apart from the wiring itself: reading the plan changes nothing (status asks it too), and
it is cached per state of the checkouts' pyproject.toml and uv.lock.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import PatchToolError
from ..model.manifest import Manifest, Upstream
from .checkout import checkout_dir, is_repo

_LOCK_SOURCE = re.compile(r'^source = \{ (?:editable|directory|path) = "([^"]+)" \}$')


@dataclass(frozen=True)
class Link:
    """`host`'s nested `path` (relative to the host checkout) must resolve to `target`."""

    host: str
    path: str
    target: str
    distribution: str
    origin: str  # where the path was read (pyproject.toml or a uv.lock)


def normalise_name(name: str) -> str:
    """PEP 503 name normalisation (`Megatron_Core` -> `megatron-core`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def nested_path(path: str) -> str | None:
    """`path` as a clean relative path inside its checkout, or None if it leaves it."""
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or pure.parts[0] == ".git":
        return None
    return pure.as_posix() if pure.as_posix() != "." else None


def uv_path_sources(checkout: Path) -> dict[str, str] | None:
    """Normalised package -> path of the `[tool.uv.sources]` path entries of `checkout`'s
    pyproject.toml (None when it has no pyproject.toml, e.g. a wheel stand-in)."""
    pyproject = checkout / "pyproject.toml"
    if not pyproject.is_file():
        return None
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise PatchToolError(f"{pyproject}: invalid TOML ({exc}); fix or reset it") from exc
    sources = data.get("tool", {}).get("uv", {}).get("sources", {})
    out: dict[str, str] = {}
    for name, spec in sources.items() if isinstance(sources, dict) else ():
        for entry in spec if isinstance(spec, list) else [spec]:
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                out[normalise_name(name)] = entry["path"]
    return out


def uv_lock_paths(checkout: Path) -> dict[str, str]:
    """Normalised package -> local source path recorded in `checkout`'s uv.lock.

    A line scan of uv.lock's fixed layout (`[[package]]`, `name = ...`, `source = { editable
    = ... }`): a full TOML parse of NeMo-RL's 0.9 MB lock costs 0.35 s on every status.
    """
    lock = checkout / "uv.lock"
    if not lock.is_file():
        return {}
    out: dict[str, str] = {}
    name = ""
    for line in lock.read_text(encoding="utf-8").splitlines():
        if line == "[[package]]":
            name = ""
        elif line.startswith('name = "') and not name:
            name = normalise_name(line[8:-1])
        elif name and (match := _LOCK_SOURCE.match(line)):
            out[name] = match.group(1)
    return out


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


# plan_links results by what they are read from (each checkout's pyproject.toml and uv.lock):
# apply and status ask once per upstream, and NeMo-RL's lock is 0.9 MB.
_PLANS: dict[tuple[object, ...], list[Link]] = {}


def plan_links(root: Path, manifest: Manifest) -> list[Link]:
    """Every link the checkouts present here call for, in manifest order of their hosts."""
    key: list[object] = [root]
    for up in manifest.upstreams.values():
        repo = checkout_dir(root, up)
        key += [up.name, up.path, up.distribution, is_repo(repo)]
        key += [_stat(repo / "pyproject.toml"), _stat(repo / "uv.lock")]
    if tuple(key) not in _PLANS:
        _PLANS[tuple(key)] = _plan_links(root, manifest)
    return list(_PLANS[tuple(key)])


def _plan_links(root: Path, manifest: Manifest) -> list[Link]:
    by_dist = {normalise_name(u.distribution): u for u in manifest.upstreams.values()}
    links: list[Link] = []
    for host in manifest.upstreams.values():
        repo = checkout_dir(root, host)
        sources = uv_path_sources(repo) if is_repo(repo) else None
        for dist, raw in (sources or {}).items():
            target = by_dist.get(dist)
            path = nested_path(raw)
            if target and target.name != host.name and path:
                origin = f"{host.path}/pyproject.toml [tool.uv.sources]"
                links.append(Link(host.name, path, target.name, dist, origin))
    for link in list(links):
        inner = manifest.upstreams[link.target]
        inner_repo = checkout_dir(root, inner)
        if not is_repo(inner_repo) or uv_path_sources(inner_repo) is not None:
            continue
        host = manifest.upstreams[link.host]
        for dist, raw in uv_lock_paths(checkout_dir(root, host)).items():
            target = by_dist.get(dist)
            path = nested_path(raw)
            if not (target and path and path.startswith(link.path + "/")):
                continue
            rest = path[len(link.path) + 1 :]
            if target.name not in (inner.name, host.name) and rest:
                origin = f"{host.path}/uv.lock ({inner.path} has no pyproject.toml)"
                links.append(Link(inner.name, rest, target.name, dist, origin))
    return links


def host_links(root: Path, manifest: Manifest, host: Upstream) -> list[Link]:
    return [link for link in plan_links(root, manifest) if link.host == host.name]
