"""`patches/upstreams.toml`: the one description of each upstream (pin, URL, stand-in).

Read with tomllib into dataclasses; written back by `set_pin` (which edits only the pin lines
so comments survive) or `dumps` (a full deterministic rendering), since rebase moves pins.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PatchToolError

MANIFEST_PATH = Path("patches") / "upstreams.toml"
_SHA_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_STANDIN_KINDS = ("sdist", "wheel")


@dataclass(frozen=True)
class Standin:
    """A release archive on PyPI laid out at repository paths when the clone is unreachable."""

    kind: str
    package: str
    tag_format: str
    version: str
    proxy: bool
    paths: dict[str, str]
    # How the proxy release was chosen (a content measurement); informational, so it is kept
    # out of repr (the apply digest) and a re-worded basis never forces a re-apply.
    basis: str = field(default="", repr=False)


@dataclass(frozen=True)
class Upstream:
    name: str
    path: str
    url: str
    tag: str
    commit: str
    distribution: str
    standin: Standin | None
    line: int = 0  # line of the [name] table header
    commit_line: int = 0  # line of `commit = ...`
    # The branch features land on before `main` (Megatron-LM's `dev`), "" when none: the status
    # page says how the series applies there too. Out of repr (the apply digest): it never
    # changes what is applied.
    feeder: str = field(default="", repr=False)

    @property
    def series_dir(self) -> Path:
        return Path("patches") / self.name


@dataclass
class Manifest:
    root: Path
    upstreams: dict[str, Upstream] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.root / MANIFEST_PATH

    def select(self, names: list[str] | None) -> list[Upstream]:
        """The named upstreams (all when `names` is empty), in manifest order."""
        if not names:
            return list(self.upstreams.values())
        unknown = [n for n in names if n not in self.upstreams]
        if unknown:
            known = ", ".join(self.upstreams)
            raise PatchToolError(f"unknown upstream {', '.join(unknown)}; known: {known}")
        return [self.upstreams[n] for n in names]


def _require(table: dict[str, object], key: str, where: str, kind: type) -> object:
    value = table.get(key)
    if not isinstance(value, kind):
        raise PatchToolError(f"{where}: `{key}` missing or not a {kind.__name__}")
    return value


def _line_numbers(text: str) -> dict[str, tuple[int, int]]:
    """For each top-level table: (header line, `commit =` line)."""
    found: dict[str, tuple[int, int]] = {}
    current = ""
    for number, line in enumerate(text.splitlines(), 1):
        header = re.match(r'^\[\s*"?([^\]."]+)"?\s*\]\s*(#.*)?$', line)
        if header:
            current = header.group(1)
            found[current] = (number, 0)
        elif line.startswith("[") and "." in line:
            current = ""
        elif current and re.match(r"^\s*commit\s*=", line):
            found[current] = (found[current][0], number)
    return found


def _parse_standin(raw: object, where: str) -> Standin | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise PatchToolError(f"{where}.standin: must be a table")
    kind = str(_require(raw, "kind", f"{where}.standin", str))
    if kind not in _STANDIN_KINDS:
        raise PatchToolError(f"{where}.standin: kind must be one of {_STANDIN_KINDS}, not {kind!r}")
    paths = raw.get("paths", {})
    if not isinstance(paths, dict) or not paths:
        raise PatchToolError(f"{where}.standin.paths: archive prefix -> repo prefix table needed")
    return Standin(
        kind=kind,
        package=str(_require(raw, "package", f"{where}.standin", str)),
        tag_format=str(raw.get("tag_format", "{version}")),
        version=str(_require(raw, "version", f"{where}.standin", str)),
        proxy=bool(raw.get("proxy", False)),
        paths={str(k): str(v) for k, v in paths.items()},
        basis=str(raw.get("proxy_basis", "")),
    )


def load_manifest(root: Path) -> Manifest:
    """Read and validate `<root>/patches/upstreams.toml`."""
    path = root / MANIFEST_PATH
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except FileNotFoundError as exc:
        raise PatchToolError(f"{path}: manifest missing (is --root the repository?)") from exc
    except tomllib.TOMLDecodeError as exc:
        raise PatchToolError(f"{path}: invalid TOML: {exc}") from exc
    lines = _line_numbers(text)
    manifest = Manifest(root=root)
    for name, table in data.items():
        where = f"{path}:{lines.get(name, (0, 0))[0]}: [{name}]"
        if not isinstance(table, dict):
            raise PatchToolError(f"{where}: must be a table")
        commit = str(_require(table, "commit", where, str))
        if not _SHA_RE.match(commit):
            raise PatchToolError(f"{where}: commit must be a full hex object id, not {commit!r}")
        manifest.upstreams[name] = Upstream(
            name=name,
            path=str(_require(table, "path", where, str)),
            url=str(_require(table, "url", where, str)),
            tag=str(table.get("tag", "")),
            commit=commit,
            distribution=str(table.get("distribution", "")),
            standin=_parse_standin(table.get("standin"), where),
            line=lines.get(name, (0, 0))[0],
            commit_line=lines.get(name, (0, 0))[1],
            feeder=str(table.get("feeder", "")),
        )
    return manifest


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dumps(manifest: Manifest) -> str:
    """A full deterministic rendering of the manifest (no comments)."""
    out: list[str] = []
    for up in manifest.upstreams.values():
        out.append(f"[{up.name}]")
        for key in ("path", "url", "tag", "commit", "distribution"):
            out.append(f"{key} = {_toml_str(getattr(up, key))}")
        if up.feeder:
            out.append(f"feeder = {_toml_str(up.feeder)}")
        out.append("")
        if up.standin:
            s = up.standin
            out.append(f"[{up.name}.standin]")
            out.append(f"kind = {_toml_str(s.kind)}")
            out.append(f"package = {_toml_str(s.package)}")
            out.append(f"tag_format = {_toml_str(s.tag_format)}")
            out.append(f"version = {_toml_str(s.version)}")
            out.append(f"proxy = {'true' if s.proxy else 'false'}")
            if s.basis:
                out.append(f"proxy_basis = {_toml_str(s.basis)}")
            out.append("")
            out.append(f"[{up.name}.standin.paths]")
            out += [f"{_toml_str(k)} = {_toml_str(v)}" for k, v in s.paths.items()]
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def set_pin(
    text: str,
    name: str,
    *,
    tag: str,
    commit: str,
    version: str | None = None,
    proxy: bool | None = None,
    basis: str | None = None,
) -> str:
    """Return manifest `text` with upstream `name` pinned to tag/commit (and stand-in fields).

    Only those value lines change; comments and layout are kept, so diffs stay reviewable.
    `version`, `proxy` and `basis` (the `proxy_basis` line) are left alone when None; a
    missing `proxy`/`proxy_basis` line is added after `version`, and `basis=""` removes it.
    """
    values: dict[str, object] = {"tag": tag, "commit": commit}
    standin_values = {"version": version, "proxy": proxy, "proxy_basis": basis}
    out: list[str] = []
    section = ""
    done: set[str] = set()
    anchor = -1
    for line in text.splitlines(keepends=True):
        header = re.match(r'^\[\s*"?([^\]"]+?)"?\s*\]', line)
        if header:
            section = header.group(1)
        key = re.match(r"^(\s*)(tag|commit|version|proxy|proxy_basis)(\s*=\s*)", line)
        table = (
            values if section == name else standin_values if section == f"{name}.standin" else {}
        )
        if key and key.group(2) in table:
            value = table[key.group(2)]
            done.add(key.group(2))
            if key.group(2) == "proxy_basis" and value == "":
                continue
            if value is not None:
                eol = "\n" if line.endswith("\n") else ""
                line = f"{key.group(1)}{key.group(2)}{key.group(3)}{_toml_value(value)}{eol}"
            if key.group(2) in ("version", "proxy"):
                anchor = len(out)  # new stand-in lines go after `version`, or `proxy` if any
        out.append(line)
    if not {"tag", "commit"} <= done:
        raise PatchToolError(f"{MANIFEST_PATH}: [{name}] has no tag/commit lines to update")
    if anchor >= 0:
        extra = [
            f"{k} = {_toml_value(v)}\n"
            for k, v in (("proxy", proxy), ("proxy_basis", basis))
            if v not in (None, "") and k not in done
        ]
        out[anchor + 1 : anchor + 1] = extra
    return "".join(out)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return _toml_str(str(value))


def version_for_tag(standin: Standin, ref: str) -> str:
    """`core_v0.19.0` -> `0.19.0` through `tag_format`; "" when `ref` is not such a tag."""
    prefix, _, suffix = standin.tag_format.partition("{version}")
    pattern = (
        re.escape(prefix) + r"(\d+(?:\.\d+)*(?:(?:a|b|rc|\.post|\.dev)\d+)*)" + re.escape(suffix)
    )
    match = re.fullmatch(pattern, ref)
    return match.group(1) if match else ""


def tag_for_version(standin: Standin, version: str) -> str:
    return standin.tag_format.replace("{version}", version)


def short(ref: str) -> str:
    return ref[:12] if re.fullmatch(r"[0-9a-f]{40}", ref) else ref


def standin_problems(up: Upstream) -> list[str]:
    """Where `up`'s stand-in fields contradict its pin (offline, from the manifest alone).

    A pin whose tag is a release must be its own stand-in (`proxy = false`, that version);
    `proxy = false` claims the pin IS that release, so its tag must be the release tag;
    `version` is never empty. `tools/patches pin NAME REF` writes consistent fields.
    """
    s = up.standin
    if s is None:
        return []
    fix = f"fix with tools/patches pin {up.name} {up.tag or up.commit}"
    if not s.version:
        return [f"[{up.name}] standin.version is empty; {fix}"]
    release = version_for_tag(s, up.tag) if up.tag else ""
    if release and (s.version, s.proxy) != (release, False):
        return [
            f"[{up.name}] pin tag {up.tag} is release {release}: want version = "
            f'"{release}", proxy = false (have version = "{s.version}", proxy = '
            f"{'true' if s.proxy else 'false'}); {fix}"
        ]
    if not s.proxy and not release:
        return [
            f"[{up.name}] proxy = false says release {s.version} (tag "
            f"{tag_for_version(s, s.version)}) is the pin, but the pin's tag is "
            f'{up.tag or "empty"}; set tag = "{tag_for_version(s, s.version)}" if the pin is '
            f"that release, else proxy = true; {fix}"
        ]
    if not s.proxy and s.basis:
        return [f"[{up.name}] proxy_basis given with proxy = false; {fix}"]
    return []
