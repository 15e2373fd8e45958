"""`check-pins`: are the three pins one coherent stack?

For every pinned upstream A whose tree (at our pin) nests another of our upstreams B as a
submodule (matched by URL in A's .gitmodules), compare A's nested gitlink with our pin of B:
same / ours-ahead / ours-behind / diverged where B's history is here, "unknown" where not.
Also compare the megatron-core requirement A's pyproject declares with the version of our
Megatron-LM pin (a small PEP 440 subset: the operators Python packaging uses in practice).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..errors import ExitCode
from ..git.git import git_ok, git_text
from ..model.manifest import Manifest, Upstream, load_manifest, short, version_for_tag
from .checkout import checkout_dir, has_commit, is_real_clone

SAME, AHEAD, BEHIND, DIVERGED, UNKNOWN = "same", "ours-ahead", "ours-behind", "diverged", "unknown"
OK, VIOLATED, UNCONSTRAINED = "satisfied", "violated", "unconstrained"
_REQ_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*?)\s*(;.*)?$")
_VERSION_RE = re.compile(
    r"^v?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|rc|alpha|beta|c)[-_.]?(\d*))?"
    r"(?:[-_.]?post[-_.]?(\d*))?(?:[-_.]?dev[-_.]?(\d*))?(?:\+.*)?$"
)


@dataclass
class Relation:
    kind: str  # "nested-gitlink" | "requirement"
    holder: str  # the upstream whose tree declares it
    holder_pin: str
    target: str  # the upstream it refers to
    ours: str  # our pin of target (commit) or our version
    theirs: str  # their gitlink commit or requirement text
    state: str
    detail: str = ""


def norm_url(url: str) -> str:
    url = url.strip().rstrip("/")
    url = re.sub(r"\.git$", "", url)
    url = re.sub(r"^git@([^:]+):", r"https://\1/", url)
    return url.lower()


def history(root: Path, up: Upstream) -> Path | None:
    """The checkout if it is a real clone (not a stand-in) holding our pin."""
    repo = checkout_dir(root, up)
    return repo if is_real_clone(repo) and has_commit(repo, up.commit) else None


def nested_gitlinks(repo: Path, commit: str) -> dict[str, tuple[str, str]]:
    """URL (normalised) -> (path, gitlink commit) of the submodules in `commit`'s tree."""
    text = git_text(["show", f"{commit}:.gitmodules"], repo, check=False)
    paths: dict[str, str] = {}
    name = ""
    entries: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        header = re.match(r'^\s*\[submodule\s+"(.+)"\]\s*$', line)
        if header:
            name = header.group(1)
            entries[name] = {}
        elif name and "=" in line:
            key, value = line.split("=", 1)
            entries[name][key.strip()] = value.strip()
    for entry in entries.values():
        if "path" in entry and "url" in entry:
            paths[entry["path"]] = norm_url(entry["url"])
    out: dict[str, tuple[str, str]] = {}
    for path, url in paths.items():
        row = git_text(["ls-tree", commit, "--", path], repo, check=False)
        parts = row.split()
        if len(parts) >= 3 and parts[0] == "160000":
            out[url] = (path, parts[2])
    return out


def compare_commits(repo: Path | None, ours: str, theirs: str) -> tuple[str, str]:
    if ours == theirs:
        return SAME, ""
    if repo is None:
        return UNKNOWN, "no history of this upstream here"
    for sha in (ours, theirs):
        if not git_ok(["cat-file", "-e", f"{sha}^{{commit}}"], repo):
            return UNKNOWN, f"{sha[:12]} is not in {repo.name}'s local history"
    if git_ok(["merge-base", "--is-ancestor", theirs, ours], repo):
        n = git_text(["rev-list", "--count", f"{theirs}..{ours}"], repo)
        return AHEAD, f"ours is {n} commits ahead"
    if git_ok(["merge-base", "--is-ancestor", ours, theirs], repo):
        n = git_text(["rev-list", "--count", f"{ours}..{theirs}"], repo)
        return BEHIND, f"ours is {n} commits behind"
    return DIVERGED, "neither contains the other"


# --- PEP 440 subset -----------------------------------------------------------------------------

Version = tuple[tuple[int, ...], tuple[int, int], int, int]


def parse_version(text: str) -> Version | None:
    """(release, (pre-kind, pre-n), post, dev) ordered like PEP 440 for the common forms."""
    match = _VERSION_RE.match(text.strip().lower())
    if not match:
        return None
    release = tuple(int(x) for x in match.group(1).split("."))
    pre_kind = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2}.get(match.group(2) or "", 3)
    pre = (pre_kind, int(match.group(3) or 0))
    post = int(match.group(4) or 0) if match.group(4) is not None else -1
    dev = int(match.group(5) or 0) if match.group(5) is not None else 1 << 30
    if match.group(5) is not None and match.group(2) is None and post < 0:
        pre = (-1, 0)  # 1.0.dev0 sorts before 1.0a0
    return release, pre, post, dev


def _pad(release: tuple[int, ...], n: int) -> tuple[int, ...]:
    return release + (0,) * (n - len(release))


def satisfies(version: str, spec: str) -> bool | None:
    """Does `version` satisfy a specifier set like `>=0.15.0a0,<0.17.0`? None if unparsable."""
    have = parse_version(version)
    if have is None:
        return None
    for clause in [c.strip() for c in spec.split(",") if c.strip()]:
        match = re.match(r"^(===|==|!=|<=|>=|~=|<|>)\s*(.+)$", clause)
        if not match:
            return None
        op, raw = match.groups()
        if raw.endswith(".*") and op in ("==", "!="):
            prefix = tuple(int(x) for x in raw[:-2].split("."))
            equal = (
                have[0][: len(prefix)] == prefix
                or _pad(have[0], len(prefix))[: len(prefix)] == prefix
            )
            if equal != (op == "=="):
                return False
            continue
        want = parse_version(raw)
        if want is None:
            return None
        n = max(len(have[0]), len(want[0]))
        a = (_pad(have[0], n), *have[1:])
        b = (_pad(want[0], n), *want[1:])
        same_release = a[0] == b[0]
        if op == "<" and same_release and want[1][0] == 3 and have[1][0] < 3:
            return False  # PEP 440: <V excludes pre-releases of V
        if op == ">" and same_release and want[2] < 0 and have[2] >= 0:
            return False  # PEP 440: >V excludes post-releases of V
        if op == "~=":
            upper = want[0][:-1]
            ok = a >= b and _pad(have[0], len(upper))[: len(upper)] == upper
        else:
            ok = {
                "==": a == b, "===": version == raw, "!=": a != b,
                "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b,
            }[op]  # fmt: skip
        if not ok:
            return False
    return True


def our_version(up: Upstream) -> str:
    """The release version our pin stands for ('' when the pin is not a release)."""
    if up.standin is None:
        return ""
    return version_for_tag(up.standin, up.tag) if up.tag else ""


def requirement_of(repo: Path, commit: str, distribution: str) -> str | None:
    """The specifier `distribution` carries in `commit`'s pyproject ([project] dependencies)."""
    text = git_text(["show", f"{commit}:pyproject.toml"], repo, check=False)
    if not text:
        return None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    wanted = re.sub(r"[-_.]+", "-", distribution).lower()
    for dep in data.get("project", {}).get("dependencies", []):
        match = _REQ_RE.match(dep)
        if match and re.sub(r"[-_.]+", "-", match.group(1)).lower() == wanted:
            return match.group(3).strip()
    return None


def check_pins(root: Path, manifest: Manifest | None = None) -> list[Relation]:
    manifest = manifest or load_manifest(root)
    ups = list(manifest.upstreams.values())
    relations: list[Relation] = []
    for holder in ups:
        repo = history(root, holder)
        holder_pin = f"{holder.tag or short(holder.commit)}"
        nested = nested_gitlinks(repo, holder.commit) if repo else {}
        if repo is None:
            relations.append(
                Relation("nested-gitlink", holder.name, holder_pin, "*", "", "", UNKNOWN,
                         f"no history of {holder.name} here: its submodule pins cannot be read")
            )  # fmt: skip
        for target in ups:
            if target is holder or repo is None:
                continue
            hit = nested.get(norm_url(target.url))
            if hit is None:
                continue
            path, theirs = hit
            state, detail = compare_commits(history(root, target), target.commit, theirs)
            relations.append(
                Relation("nested-gitlink", holder.name, holder_pin, target.name, target.commit,
                         theirs, state, f"{path}; {detail}" if detail else path)
            )  # fmt: skip
        for target in ups:
            if target is holder or not target.distribution:
                continue
            spec = requirement_of(repo, holder.commit, target.distribution) if repo else None
            if spec is None:
                continue
            ours = our_version(target)
            if not spec:
                state, detail = UNCONSTRAINED, f"{target.distribution} without a version bound"
            elif not ours:
                state, detail = UNKNOWN, f"our {target.name} pin is not a release"
            else:
                verdict = satisfies(ours, spec)
                state = UNKNOWN if verdict is None else (OK if verdict else VIOLATED)
                detail = f"{target.distribution} {ours} vs {spec}"
            relations.append(
                Relation("requirement", holder.name, holder_pin, target.name, ours,
                         f"{target.distribution}{spec}", state, detail)
            )  # fmt: skip
    return relations


def exit_code(relations: list[Relation]) -> ExitCode:
    if any(r.state in (AHEAD, BEHIND, DIVERGED, VIOLATED) for r in relations):
        return ExitCode.FAILED
    if any(r.state == UNKNOWN for r in relations):
        return ExitCode.NOT_VERIFIED
    return ExitCode.OK
