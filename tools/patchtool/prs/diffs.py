"""Each PR's change from its fork point, in a handful of batched git calls, cached by head.

Why batched: Megatron-LM has ~4,900 PR heads; one git process per PR costs more than the
work. The fork point is found for all PRs at once (`rev-list --stdin --parents` of every head
`--not` the target branches: the PR's own commits, whose outside parents are where it left its
branch; the newest of those is the fork), then `diff-tree --stdin` diffs every (fork, head)
pair: names first (the PR's size), patches (`-U0`) only for PRs on the series' files. The cache
(`.cache/patchtool/prs/<Upstream>.json`) keys all of it by commit ids, so it never goes stale.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..git.git import git
from .lines import Move, parse_moves

CACHE_DIR = Path(".cache") / "patchtool" / "prs"
FORMAT = 2  # bump when what the cache holds changes
_KINDS = ("forks", "names", "diffs", "moves")
_SHA_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
Cache = dict[str, dict]


def load_cache(root: Path, upstream: str) -> Cache:
    """The upstream's cache, empty when absent, unreadable or of another format."""
    try:
        data = json.loads((root / CACHE_DIR / f"{upstream}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {k: {} for k in _KINDS}
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return {k: {} for k in _KINDS}
    return {k: data.get(k) or {} for k in _KINDS}


def save_cache(root: Path, upstream: str, cache: Cache, size: int) -> None:
    """Write the cache atomically (a reader never sees half a file), unless it still holds
    `size` entries (as loaded: nothing new)."""
    if cache_size(cache) == size:
        return
    path = root / CACHE_DIR / f"{upstream}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"format": FORMAT, **cache}, separators=(",", ":")), "utf-8")
    tmp.replace(path)


def cache_size(cache: Cache) -> int:
    return sum(len(v) for v in cache.values())


def fork_points(gitdir: Path, heads: list[str], targets: list[str], cache: Cache) -> None:
    """Fill `cache["forks"]` (head -> fork point) for `heads`: the newest parent outside the PR's
    own commits; for a head already on a branch (merged by a merge commit), its first parent."""
    todo = sorted({h for h in heads if h not in cache["forks"]})
    if not todo:
        return
    stdin = "\n".join([*todo, *(f"^{t}" for t in targets)]) + "\n"
    parents: dict[str, list[str]] = {}
    for line in git(["rev-list", "--parents", "--stdin"], gitdir, input=stdin).splitlines():
        sha, *rest = line.split()
        parents[sha] = rest
    boundary: dict[str, set[str]] = {}
    on_branch = [h for h in todo if h not in parents]
    for head in todo:
        if head in parents:
            boundary[head] = _outside(head, parents)
    if on_branch:
        out = git(
            ["log", "--no-walk=unsorted", "--format=%H %P", "--stdin"],
            gitdir,
            input="\n".join(on_branch) + "\n",
        )
        for line in out.splitlines():
            sha, *rest = line.split()
            cache["forks"][sha] = rest[0] if rest else sha
    dates = _dates(gitdir, {c for cs in boundary.values() for c in cs})
    for head, outside in boundary.items():
        cache["forks"][head] = max(outside, key=lambda c: (dates.get(c, 0), c)) if outside else head


def _outside(head: str, parents: dict[str, list[str]]) -> set[str]:
    """Parents of the PR's own commits (those reachable from `head` in `parents`) that are not
    its own: where it left (or merged in) its branch."""
    seen, stack, out = {head}, [head], set()
    while stack:
        for parent in parents[stack.pop()]:
            if parent in parents:
                if parent not in seen:
                    seen.add(parent)
                    stack.append(parent)
            else:
                out.add(parent)
    return out


def _dates(gitdir: Path, commits: set[str]) -> dict[str, int]:
    if not commits:
        return {}
    out = git(
        ["log", "--no-walk=unsorted", "--format=%H %ct", "--stdin"],
        gitdir,
        input="\n".join(sorted(commits)) + "\n",
    )
    return {sha: int(ct) for sha, ct in (line.split() for line in out.splitlines())}


def _diff_tree(
    gitdir: Path, pairs: list[tuple[str, str]], opts: list[str], paths: list[str]
) -> list[list[str]]:
    """The output lines of `diff-tree --stdin` for each (old, new) pair, in order."""
    if not pairs:
        return []
    stdin = "".join(f"{b} {a}\n" for a, b in pairs)  # "<commit> <parent>": a -> b, headed b
    args = ["diff-tree", "--stdin", "--always", "-r", "--no-renames", *opts]
    out = git([*args, "--", *paths] if paths else args, gitdir, input=stdin)
    chunks: list[list[str]] = []
    want = iter(pairs)
    expect = next(want, None)
    for line in out.splitlines():
        if expect is not None and line == expect[1] and _SHA_RE.match(line):
            chunks.append([])
            expect = next(want, None)
        elif chunks:
            chunks[-1].append(line)
    return chunks + [[] for _ in range(len(pairs) - len(chunks))]


def changed_names(gitdir: Path, pairs: dict[str, tuple[str, str]], cache: Cache) -> None:
    """Fill `cache["names"]` (head -> files the PR changes) for each head -> (fork, head)."""
    todo = sorted(h for h in pairs if h not in cache["names"])
    chunks = _diff_tree(gitdir, [pairs[h] for h in todo], ["--name-only"], [])
    for head, chunk in zip(todo, chunks, strict=True):
        cache["names"][head] = chunk


def patches(
    gitdir: Path,
    pairs: dict[str, tuple[str, str]],
    paths: dict[str, list[str]],
    cache: Cache,
    headers_only: bool = False,
) -> dict[str, list[str]]:
    """key -> `-U0` diff lines of the pair `pairs[key]` limited to `paths[key]` (with
    `headers_only`, its ---/+++/@@ lines); cached under the pair, reused when it covered those
    paths."""
    out: dict[str, list[str]] = {}
    todo = []
    for key, (a, b) in pairs.items():
        hit = cache["diffs"].get(f"{a}..{b}")
        if hit and set(paths[key]) <= set(hit["paths"]):
            out[key] = hit["lines"]
        else:
            todo.append(key)
    union = sorted({p for key in todo for p in paths[key]})
    chunks = _diff_tree(gitdir, [pairs[k] for k in todo], ["-p", "-U0"], union)
    for key, chunk in zip(todo, chunks, strict=True):
        a, b = pairs[key]
        cache["diffs"][f"{a}..{b}"] = {"paths": union, "lines": chunk}
        out[key] = chunk
    return out


def moves(
    gitdir: Path, pairs: dict[str, tuple[str, str]], paths: dict[str, list[str]], cache: Cache
) -> dict[str, dict[str, list[Move]]]:
    """key -> path -> the moves of the pair `pairs[key]` (fork point -> pin) on `paths[key]`;
    cached parsed (flat ints: a fork years back has thousands of hunks), reused when the cached
    entry covered those paths."""
    out: dict[str, dict[str, list[Move]]] = {}
    todo = []
    for key, (a, b) in pairs.items():
        hit = cache["moves"].get(f"{a}..{b}")
        if hit and set(paths[key]) <= set(hit["paths"]):
            out[key] = {p: _triples(flat) for p, flat in hit["moves"].items()}
        else:
            todo.append(key)
    union = sorted({p for key in todo for p in paths[key]})
    chunks = _diff_tree(gitdir, [pairs[k] for k in todo], ["-U0"], union)
    for key, chunk in zip(todo, chunks, strict=True):
        a, b = pairs[key]
        parsed = parse_moves([x for x in chunk if x.startswith(("@@", "--- ", "+++ "))])
        flat = {p: [n for m in ms for n in m] for p, ms in parsed.items()}
        cache["moves"][f"{a}..{b}"] = {"paths": union, "moves": flat}
        out[key] = parsed
    return out


def _triples(flat: list[int]) -> list[Move]:
    return [(flat[i], flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)]
