"""Which upstream commit moved the lines a conflicting patch stands on.

A patch conflicts on a new base when lines its hunks need (their context and removed lines) are
gone there. For each hunk whose lines the old base's file has as one block but the new base's
file does not, this reads the history between the two bases:

- the commits only the new base has (`old..new`, merges left out: they carry no diff of their
  own) whose diff removed one of those lines, newest first: "moved by";
- where none did, the commits only the old base has (`new..old`) whose diff added one of them:
  the new base lacks them (a `dev` branch that `main` was not yet merged into): "lacks".

A hunk standing on lines an earlier patch of the series wrote is not upstream's doing and is
left out. Plain `git show` and `git log -p` over the patch's paths; nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..git.git import git_ok, git_text, run
from ..model.series import parse_patch_text

MOVED_BY, LACKS = "moved by", "lacks"
MIN_SIGNIFICANT = 4  # a line of fewer non-blank characters (")", "else:") proves nothing


@dataclass(frozen=True)
class Cause:
    """An upstream commit that changed lines a hunk needs, and on which side of the bases."""

    kind: str  # MOVED_BY | LACKS
    commit: str
    date: str  # YYYY-MM-DD (committer)
    subject: str
    path: str

    def text(self) -> str:
        return f"{self.kind} {self.commit[:12]} ({self.date}) {self.subject}"


def preimages(patch_text: str) -> list[tuple[str, tuple[str, ...]]]:
    """(path, old-side lines) of every hunk of a format-patch (model/series.py's parser)."""
    patch = parse_patch_text(patch_text, Path("patch"))
    return [(f.path, tuple(h.old)) for f in patch.files for h in f.hunks]


def _significant(line: str) -> bool:
    return len(line.strip()) >= MIN_SIGNIFICANT


def _file_lines(repo: Path, commit: str, path: str) -> list[str] | None:
    proc = run(["show", f"{commit}:{path}"], repo)
    return proc.stdout.decode("utf-8", "replace").splitlines() if proc.returncode == 0 else None


def _has_block(text: list[str], block: tuple[str, ...]) -> bool:
    """Whether `block` occurs in `text` as consecutive lines (offsets allowed, no fuzz)."""
    n = len(block)
    if n == 0:
        return True
    return any(tuple(text[i : i + n]) == block for i in range(len(text) - n + 1))


def _commits_touching(
    repo: Path, rev_range: str, path: str, wanted: set[str], sign: str
) -> list[tuple[str, str, str]]:
    """(commit, date, subject) of the non-merge commits in `rev_range` whose diff of `path` has
    a `sign` ("-" removed, "+" added) line whose stripped text is in `wanted`, newest first."""
    log = git_text(
        ["log", "-p", "-U0", "--no-merges", "--format=%x00%H%x09%cs%x09%s", rev_range, "--", path],
        repo,
        check=False,
    )
    found = []
    for entry in log.split("\x00")[1:]:
        header, _, diff = entry.partition("\n")
        commit, date, subject = [*header.split("\t", 2), "", ""][:3]
        changed = {
            line[1:].strip()
            for line in diff.splitlines()
            if line.startswith(sign) and not line.startswith(sign * 3)
        }
        if changed & wanted:
            found.append((commit, date, subject))
    return found


def conflict_causes(
    repo: Path, old: str, new: str, patch_text: str, paths: list[str] | None = None
) -> list[Cause]:
    """The commits that moved what the patch's failing hunks need from `old` to `new` (both
    commits in `repo`), one list over all hunks without repeats, in hunk order. `paths` limits
    it to the files the rebase engine found in conflict (others merged on their own)."""
    causes: list[Cause] = []
    seen: set[str] = set()
    files: dict[tuple[str, str], list[str] | None] = {}  # (commit, path): read once per call

    def lines_at(commit: str, path: str) -> list[str] | None:
        if (commit, path) not in files:
            files[commit, path] = _file_lines(repo, commit, path)
        return files[commit, path]

    for path, needed in preimages(patch_text):
        if paths is not None and path not in paths:
            continue
        before = lines_at(old, path)
        if before is None or not _has_block(before, needed):
            continue  # a new file, or lines an earlier patch of the series wrote
        after = lines_at(new, path)
        if after is not None and _has_block(after, needed):
            continue  # this hunk still finds its lines
        present = {line.strip() for line in after or []}
        wanted = {line.strip() for line in needed if _significant(line)}
        gone = wanted - present or wanted
        found = [
            (MOVED_BY, c) for c in _commits_touching(repo, f"{old}..{new}", path, gone, "-")
        ] or [(LACKS, c) for c in _commits_touching(repo, f"{new}..{old}", path, gone, "+")]
        for kind, (commit, date, subject) in found:
            if commit not in seen:
                seen.add(commit)
                causes.append(Cause(kind, commit, date, subject, path))
    return causes


def repo_with(repos: list[Path], *commits: str) -> Path | None:
    """The first of `repos` that has every one of `commits` (history to search), else None."""
    for repo in repos:
        if all(git_ok(["cat-file", "-e", f"{c}^{{commit}}"], repo) for c in commits):
            return repo
    return None
