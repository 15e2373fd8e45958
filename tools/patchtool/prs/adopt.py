"""`adopt`: carry someone else's open upstream PR as a patch of the series until it merges.

Why a tool: the most common fix this repository carries is an upstream PR that has not merged
yet. Carried by hand it loses its author and its link, and nothing retires it when it merges.
Here its change (from its fork point, like `prs`) is applied with a 3-way merge on the pin plus
the series, committed with the PR's author, and written as the series' last patch with
`Upstream-Status: submitted <PR URL>` (so `rebase` retires it as "merged upstream as #N" when
the target has its `(#N)` commit), its own new tests as `Upstream-Test:`, and the tripwire
`Test:` the caller names (as for every patch).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..core.git import format_patch, git, git_text, run
from ..core.manifest import Upstream
from ..core.series import read_series
from ..errors import GitError, PatchToolError
from . import diffs
from .history import load_history, pull_refs

_TEST_FILE_RE = re.compile(r"(^|/)tests?/(.+/)?test_[^/]*\.py$")
_TEST_DEF_RE = re.compile(r"^\+def (test_\w+)\(")


@dataclass
class Adopted:
    number: int
    head: str
    fork: str
    name: str  # the patch file's name in the series
    author: str
    subject: str
    url: str
    upstream_tests: list[str] = field(default_factory=list)


def pr_url(up: Upstream, number: int) -> str:
    """The PR's web address, from the upstream's clone URL."""
    base = up.url.removesuffix("/").removesuffix(".git")
    return f"{base}/pull/{number}"


def _slug(text: str) -> str:
    words = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return words[:50].rstrip("-") or "change"


def _new_tests(gitdir: Path, fork: str, head: str) -> list[str]:
    """`path::test_name` of the module-level tests the PR adds (its own tests)."""
    out = git(["diff", "-U0", "--no-color", fork, head, "--", "*test_*.py"], gitdir)
    nodes, path = [], ""
    for line in out.splitlines():
        if line.startswith("+++ "):
            path = line[6:] if line.startswith("+++ b/") else ""
        elif path and _TEST_FILE_RE.search(path) and (m := _TEST_DEF_RE.match(line)):
            nodes.append(f"{path}::{m.group(1)}")
    return nodes


def _series_tree(root: Path, up: Upstream, gitdir: Path, index: Path) -> str:
    """The pin with the series applied, in the temporary `index` (no work tree touched)."""
    env = {"GIT_INDEX_FILE": str(index)}
    git(["read-tree", up.commit], gitdir, env=env)
    for entry in read_series(root / up.series_dir / "series"):
        try:
            git(["apply", "--cached", str(root / up.series_dir / entry.name)], gitdir, env=env)
        except GitError as exc:
            raise PatchToolError(
                f"{entry.name} does not apply on the pin in {gitdir} ({exc.stderr.strip()[:160]}); "
                "the series must apply (tools/patches lint, apply) before a PR joins it"
            ) from exc
    return git_text(["write-tree"], gitdir, env=env)


def _message(
    up: Upstream, number: int, head: str, info: list[str], test: str, nodes: list[str]
) -> str:
    subject, body = info[4], "\n".join(info[5:]).strip()
    url = pr_url(up, number)
    lines = [subject, ""] + ([body, ""] if body else [])
    lines += [
        f"Adopted from upstream PR #{number} ({url}, head {head[:12]}) by tools/patches adopt:",
        "carried here until it merges; `rebase` retires it then.",
        "",
        f"Upstream-Status: submitted {url}",
        f"Origin: upstream PR #{number} by {info[0]}, adopted (author kept)",
        f"Test: {test}",
        *(f"Upstream-Test: {node}" for node in nodes),
    ]
    return "\n".join(lines) + "\n"


def adopt(
    root: Path, up: Upstream, gitdir: Path, number: int, test: str, name: str = ""
) -> Adopted:
    """Write PR `number` of `gitdir` as the last patch of `up`'s series; the written patch."""
    ref = pull_refs(gitdir).get(number)
    if ref is None:
        raise PatchToolError(
            f"{gitdir} has no refs/pull/{number}/head; fetch it there with git fetch origin "
            f"'+refs/pull/{number}/head:refs/pull/{number}/head', or pass --from a git dir that has it"
        )
    history = load_history(gitdir, up.commit, up.feeder)
    cache = diffs.load_cache(root, up.name)
    diffs.fork_points(gitdir, [ref.head], history.targets, cache)
    fork = cache["forks"][ref.head]
    own = git_text(["rev-list", "--reverse", "--no-merges", f"{fork}..{ref.head}"], gitdir).split()
    first = own[0] if own else ref.head
    info = git(["log", "-1", "--format=%an%n%ae%n%aI%n%H%n%s%n%b", first], gitdir).splitlines()
    name = name or f"pr{number}-{_slug(info[4])}.patch"
    target = root / up.series_dir / name
    if target.exists() or name in {e.name for e in read_series(root / up.series_dir / "series")}:
        raise PatchToolError(f"{target.relative_to(root)} exists; pass --name for another file")
    nodes = _new_tests(gitdir, fork, ref.head)
    author = {  # the PR's author, also as committer: the commit is theirs, remade on our base
        f"GIT_{role}_{key}": value
        for role in ("AUTHOR", "COMMITTER")
        for key, value in (("NAME", info[0]), ("EMAIL", info[1]), ("DATE", info[2]))
    }
    with tempfile.TemporaryDirectory(prefix="adopt-") as tmp:
        index, diff = Path(tmp) / "index", Path(tmp) / "pr.diff"
        base_tree = _series_tree(root, up, gitdir, index)
        base = git_text(
            ["commit-tree", base_tree, "-p", up.commit, "-m", "series"], gitdir, env=author
        )
        diff.write_bytes(git(["diff", "--binary", "--full-index", fork, ref.head], gitdir).encode())
        env = {"GIT_INDEX_FILE": str(index)}
        failed = _apply_3way(gitdir, diff, env)
        if failed:
            raise PatchToolError(
                f"PR #{number} does not merge onto the pin with the series ({failed}); "
                "adopt takes a PR that merges cleanly: ask upstream to rebase it, or port it by hand"
            )
        tree = git_text(["write-tree"], gitdir, env=env)
    message = _message(up, number, ref.head, info, test, nodes)
    commit = git_text(
        ["commit-tree", tree, "-p", base, "-F", "-"], gitdir, input=message, env=author
    )
    target.write_bytes(format_patch(gitdir, f"{commit}^!"))
    series = root / up.series_dir / "series"
    text = series.read_text(encoding="utf-8")
    series.write_text(text + ("" if text.endswith("\n") or not text else "\n") + name + "\n")
    return Adopted(
        number, ref.head, fork, name, f"{info[0]} <{info[1]}>", info[4], pr_url(up, number), nodes
    )


def _apply_3way(gitdir: Path, diff: Path, env: dict[str, str]) -> str:
    """ "" when the PR's diff merged into the index, else the conflicting paths."""
    proc = run(["apply", "--cached", "--3way", str(diff)], gitdir, env=env)
    if proc.returncode == 0:
        return ""
    unmerged = git_text(["ls-files", "-u"], gitdir, env=env, check=False)
    paths = sorted({line.split("\t", 1)[-1] for line in unmerged.splitlines() if "\t" in line})
    return (
        "conflict in " + ", ".join(paths)
        if paths
        else proc.stderr.decode(errors="replace").strip()[:200]
    )
