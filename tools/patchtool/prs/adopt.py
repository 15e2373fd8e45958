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

from ..errors import GitError, PatchToolError
from ..git.git import format_patch, git, git_text, run
from ..model.manifest import Upstream
from ..model.series import RETIRED_DIR, SERIES_FILE, parse_patch, read_series
from ..model.trailers import EVIDENCE_KEY, STATUS_KEY, adopted_origin, set_patch_trailer
from . import diffs
from .history import load_history, pull_refs

_TEST_FILE_RE = re.compile(r"(^|/)tests?/(.+/)?test_[^/]*\.py$")
_TEST_DEF_RE = re.compile(r"^\+def (test_\w+)\(")
_TEST_CLASS_RE = re.compile(r"^\+class (Test\w*)\b")
_TEST_METHOD_RE = re.compile(r"^\+    (?:async )?def (test_\w+)\(")
_CONTEXT_CLASS_RE = re.compile(r"^@@ .* @@ class (Test\w*)\b")


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
    replaced: str = ""  # our patch it took the place of (now retired), if any
    later: int = 0  # patches after it in the series (re-export them: their offsets moved)


def pr_url(up: Upstream, number: int) -> str:
    """The PR's web address, from the upstream's clone URL."""
    base = up.url.removesuffix("/").removesuffix(".git")
    return f"{base}/pull/{number}"


def _slug(text: str, limit: int = 50) -> str:
    """The subject as a file name: lower-case words joined by '-', whole words up to `limit`."""
    words = re.sub(r"[^a-z0-9]+", " ", text.lower()).split()
    slug = words[0][:limit] if words else "change"
    for word in words[1:]:
        if len(slug) + 1 + len(word) > limit:
            break
        slug += "-" + word
    return slug


def _new_tests(gitdir: Path, fork: str, head: str) -> list[str]:
    """`path::test_name` and `path::TestClass::test_name` of the tests the PR adds (its own
    tests): pytest's classes are how Megatron-LM writes most of its unit tests."""
    out = git(["diff", "-U0", "--no-color", fork, head, "--", "*test_*.py"], gitdir)
    nodes, path, cls = [], "", ""
    for line in out.splitlines():
        if line.startswith("+++ "):
            path, cls = (line[6:] if line.startswith("+++ b/") else ""), ""
        elif not path or not _TEST_FILE_RE.search(path):
            continue
        elif m := _CONTEXT_CLASS_RE.match(line):
            cls = m.group(1)  # a hunk inside an existing test class
        elif line.startswith("@@"):
            cls = ""
        elif m := _TEST_CLASS_RE.match(line):
            cls = m.group(1)
        elif line.startswith("+") and line[1:2] not in ("", " ", "\t", "#", "@", ")"):
            cls = ""  # another top-level statement ends the class
            if m := _TEST_DEF_RE.match(line):
                nodes.append(f"{path}::{m.group(1)}")
        elif cls and (m := _TEST_METHOD_RE.match(line)):
            nodes.append(f"{path}::{cls}::{m.group(1)}")
    return nodes


def _series_tree(root: Path, up: Upstream, gitdir: Path, index: Path, names: list[str]) -> str:
    """The pin with the series' `names` applied, in the temporary `index` (no work tree)."""
    env = {"GIT_INDEX_FILE": str(index)}
    git(["read-tree", up.commit], gitdir, env=env)
    _apply_each(root, up, gitdir, env, names, "on the pin")
    return git_text(["write-tree"], gitdir, env=env)


def _apply_each(
    root: Path, up: Upstream, gitdir: Path, env: dict[str, str], names: list[str], where: str
) -> None:
    for name in names:
        try:
            git(["apply", "--cached", str(root / up.series_dir / name)], gitdir, env=env)
        except GitError as exc:
            raise PatchToolError(
                f"{name} does not apply {where} in {gitdir} ({exc.stderr.strip()[:160]}); "
                "the series must apply (tools/patches lint, apply) before a PR joins it"
            ) from exc


def _message(
    up: Upstream, number: int, head: str, info: list[str], tests: list[str], nodes: list[str]
) -> str:
    subject, body = info[4], "\n".join(info[5:]).strip()
    url = pr_url(up, number)
    lines = [subject, ""] + ([body, ""] if body else [])
    lines += [
        f"Adopted from upstream PR #{number} ({url}, head {head[:12]}) by tools/patches adopt:",
        "carried here until it merges; `rebase` retires it then.",
        "",
        f"Upstream-Status: submitted {url}",
        f"Origin: {adopted_origin(number, info[0])}",
        *(f"Test: {node}" for node in tests),
        *(f"Upstream-Test: {node}" for node in nodes),
    ]
    return "\n".join(lines) + "\n"


@dataclass
class _Place:
    """Where the PR goes: the series' names before it and after it, and the tripwire."""

    entries: list[str]
    before: list[str]
    after: list[str]
    tests: list[str]
    replaces: str = ""  # our patch whose place it takes


def _place(root: Path, up: Upstream, replaces: str, test: str) -> _Place:
    """Last in the series, or in the place of `replaces` (whose `Test:` lines it inherits)."""
    series_dir = root / up.series_dir
    entries = [e.name for e in read_series(series_dir / SERIES_FILE)]
    place = _Place(entries, entries, [], [test] if test else [], replaces)
    if replaces:
        if replaces not in entries:
            raise PatchToolError(
                f"--replaces {replaces}: not in {(series_dir / SERIES_FILE).relative_to(root)}; "
                f"name one of its patches ({', '.join(entries[:3])}, ...)"
            )
        at = entries.index(replaces)
        place.before, place.after = entries[:at], entries[at + 1 :]
        place.tests = place.tests or parse_patch(series_dir / replaces).trailer_values("Test")
    if not place.tests:
        raise PatchToolError(
            "--test NODE is required: the tripwire in this repository that fails without the PR "
            "(tests/patches/...::test_x); a tripwire cannot be invented from the PR"
        )
    return place


def _commit(
    root: Path,
    up: Upstream,
    gitdir: Path,
    pr: tuple[int, str, str],
    place: _Place,
    message: str,
    author: dict[str, str],
) -> str:
    """The PR `(number, fork, head)` as one commit on the pin plus `place.before`, checked to
    let `place.after` still apply; in a temporary index, no work tree touched."""
    number, fork, head = pr
    with tempfile.TemporaryDirectory(prefix="adopt-") as tmp:
        index, diff = Path(tmp) / "index", Path(tmp) / "pr.diff"
        base_tree = _series_tree(root, up, gitdir, index, place.before)
        base = git_text(
            ["commit-tree", base_tree, "-p", up.commit, "-m", "series"], gitdir, env=author
        )
        diff.write_bytes(git(["diff", "--binary", "--full-index", fork, head], gitdir).encode())
        env = {"GIT_INDEX_FILE": str(index)}
        failed = _apply_3way(gitdir, diff, env)
        if failed:
            raise PatchToolError(
                f"PR #{number} does not merge onto the pin with the series ({failed}); "
                "adopt takes a PR that merges cleanly: ask upstream to rebase it, or port it by hand"
            )
        tree = git_text(["write-tree"], gitdir, env=env)
        # The patches after the replaced one must still apply on the PR (offsets allowed).
        _apply_each(
            root, up, gitdir, env, place.after, f"after PR #{number} in place of {place.replaces}"
        )
    return git_text(["commit-tree", tree, "-p", base, "-F", "-"], gitdir, input=message, env=author)


def adopt(
    root: Path,
    up: Upstream,
    gitdir: Path,
    number: int,
    test: str = "",
    name: str = "",
    replaces: str = "",
) -> Adopted:
    """Write PR `number` of `gitdir` as a patch of `up`'s series: the last one, or in the place
    of our patch `replaces` (retired, the PR named as what supersedes it). The tripwire is
    `test`, else the replaced patch's `Test:` lines (they prove the same fix)."""
    ref = pull_refs(gitdir).get(number)
    if ref is None:
        raise PatchToolError(
            f"{gitdir} has no refs/pull/{number}/head; fetch it there with git fetch origin "
            f"'+refs/pull/{number}/head:refs/pull/{number}/head', or pass --from a git dir that has it"
        )
    place = _place(root, up, replaces, test)
    history = load_history(gitdir, up.commit, up.feeder)
    cache = diffs.load_cache(root, up.name)
    diffs.fork_points(gitdir, [ref.head], history.targets, cache)
    fork = cache["forks"][ref.head]
    own = git_text(["rev-list", "--reverse", "--no-merges", f"{fork}..{ref.head}"], gitdir).split()
    info = git(
        ["log", "-1", "--format=%an%n%ae%n%aI%n%H%n%s%n%b", own[0] if own else ref.head], gitdir
    ).splitlines()
    series_dir = root / up.series_dir
    name = name or f"pr{number}-{_slug(info[4])}.patch"
    if (series_dir / name).exists() or name in place.entries:
        raise PatchToolError(f"{up.series_dir / name} exists; pass --name for another file")
    nodes = _new_tests(gitdir, fork, ref.head)
    author = {  # the PR's author, also as committer: the commit is theirs, remade on our base
        f"GIT_{role}_{key}": value
        for role in ("AUTHOR", "COMMITTER")
        for key, value in (("NAME", info[0]), ("EMAIL", info[1]), ("DATE", info[2]))
    }
    message = _message(up, number, ref.head, info, place.tests, nodes)
    commit = _commit(root, up, gitdir, (number, fork, ref.head), place, message, author)
    (series_dir / name).write_bytes(format_patch(gitdir, f"{commit}^!"))
    series = series_dir / SERIES_FILE
    text = series.read_text(encoding="utf-8")
    if replaces:
        series.write_text(_series_replacing(text, replaces, name), encoding="utf-8")
        _retire(series_dir / replaces, number, pr_url(up, number), name)
        _redirect_depends(root, f"{up.name}/{replaces}", f"{up.name}/{name}")
    else:
        series.write_text(text + ("" if text.endswith("\n") or not text else "\n") + name + "\n")
    who, url = f"{info[0]} <{info[1]}>", pr_url(up, number)
    return Adopted(
        number, ref.head, fork, name, who, info[4], url, nodes, replaces, len(place.after)
    )


def _series_replacing(text: str, old: str, new: str) -> str:
    """The series file with `old`'s entry named `new` (comments, order kept)."""
    out = []
    for line in text.splitlines(keepends=True):
        if line.split("#", 1)[0].strip() == old:
            line = line.replace(old, new, 1)
        out.append(line)
    return "".join(out)


def _redirect_depends(root: Path, old: str, new: str) -> None:
    """`Depends-On: old` -> `Depends-On: new` in every series' patches (Bridge's patches depend
    on Megatron-LM's): what they needed from ours, the PR in its place now provides."""
    for path in sorted((root / "patches").glob("*/*.patch")):
        data = path.read_bytes()
        head, sep, diff = data.partition(b"\ndiff --git ")
        line = f"\nDepends-On: {old}\n".encode()
        if line in head + b"\n":
            head = (head + b"\n").replace(line, f"\nDepends-On: {new}\n".encode())[:-1]
            path.write_bytes(head + sep + diff)


def _retire(path: Path, number: int, url: str, name: str) -> None:
    """Move our patch to the retired folder, the adopted PR named as what supersedes it."""
    data = set_patch_trailer(
        path.read_bytes(),
        STATUS_KEY,
        f"not-needed superseded by upstream PR #{number} ({url}), carried as {name}",
        path,
    )
    data = set_patch_trailer(
        data,
        EVIDENCE_KEY,
        f"superseded-by-pr (#{number} makes the same fix; retired by tools/patches adopt)",
        path,
    )
    retired = path.parent / RETIRED_DIR
    retired.mkdir(exist_ok=True)
    (retired / path.name).write_bytes(data)
    path.unlink()


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
