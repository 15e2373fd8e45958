"""`apply` and `reset`: bring a checkout to its pin and apply its series strictly, atomically.

Strict: `git am -k` without -3 (git refuses fuzz; offsets are fine). Reproducible: committer
identity and date are the patch's author and date. Idempotent: a digest of pin + series in the
checkout's config plus `refs/patchtool/applied` make a repeated run a fast no-op. Atomic: any
failure aborts `git am` and restores HEAD, branch refs, index and worktree (and the stash).

Proxies (`proxy = true`: the nearest release standing in for a non-release pin) are used only
when the exact source is unavailable: a proxy stand-in found while the URL answers is
replaced by the clone. On a proxy every patch is labelled (tools/patchtool/source/proxy.py) and a
patch whose hunks do not apply there is left out and reported "not verified here" (exit 3
unless --allow-missing); the rest of the series is applied.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from ..errors import GitError, PatchToolError
from ..git.git import git, git_text, rev
from ..model.manifest import Manifest, Upstream
from ..model.series import Patch, Series, SeriesEntry, load_series
from ..source.checkout import (
    APPLIED_REF,
    BRANCH,
    BRANCH_REF,
    PIN_REF,
    checkout_dir,
    clone_failed,
    dirty_files,
    head_of,
    is_applied,
    is_repo,
    record_applied,
    series_digest,
)
from ..source.detect import (
    MISSING,
    STANDIN,
    Source,
    detect_source,
    effective_url,
    ensure_source,
    url_answers,
)
from ..source.nested_wiring import NO_TARGET, unwire_host, wire_host
from ..source.proxy import ProxyCheck, check_series, proxy_name
from ..source.standin import Downloader, pip_download
from .apply_guards import (
    check_preimages,
    check_safe_paths,
    guard_branch,
    refuse_in_progress,
    refuse_or_stash,
)

_AM_OPTS = ["-k", "--quiet", "--no-3way", "--whitespace=nowarn", "--committer-date-is-author-date"]


class State(StrEnum):
    """What `apply`/`reset` did to one upstream (its `state` in `--json`).

    APPLIED: the series is now on branch `patched`. UNCHANGED: it already was (a no-op).
    RESET: the pin is checked out, detached. NOT_VERIFIED: nothing failed, but the series is not
    (wholly) verified here: the upstream is missing, or patches were left out on a proxy (exit 3
    unless --allow-missing). ERROR: this upstream failed with the recorded message; the others
    still ran (exit 1).
    """

    APPLIED = "applied"
    UNCHANGED = "unchanged"
    RESET = "reset"
    NOT_VERIFIED = "not-verified"
    ERROR = "error"


@dataclass
class Outcome:
    """What happened to one upstream: its `State`, a one-line message, and on a proxy the
    per-patch labels."""

    name: str
    state: State
    message: str
    patches: int = 0
    head: str = ""
    stash: str = ""
    proxy: str = ""  # non-empty: the series went onto a proxy (named here), never the pin
    checks: list[ProxyCheck] = field(default_factory=list)
    wiring: list[dict[str, str]] = field(default_factory=list)  # source/nested_wiring.py rows
    wiring_lines: list[str] = field(default_factory=list)  # what changed, for the report

    def as_dict(self) -> dict[str, object]:
        row = {k: v for k, v in self.__dict__.items() if k not in ("checks", "wiring_lines")}
        row["patch_labels"] = [c.as_dict() for c in self.checks]
        return row

    def lines(self) -> list[str]:
        """One line per patch on a proxy, each naming the proxy (nothing claims the pin); one
        per nested link apply made or could not make, or reset removed."""
        checks = [f"{c.patch}: {c.label} [{self.proxy}]" for c in self.checks]
        return checks + [f"nested {line}" for line in self.wiring_lines]


def _refs(repo: Path, names: tuple[str, ...]) -> dict[str, str]:
    """Several refs in one git call ('' for the absent ones)."""
    out = git_text(["for-each-ref", "--format=%(refname) %(objectname)", *names], repo)
    pairs = (line.split(" ", 1) for line in out.splitlines() if line)
    found = {name: sha for name, sha in pairs}
    return {name: found.get(name, "") for name in names}


def is_noop(repo: Path, digest: str) -> bool:
    """True if the checkout already is the applied state of exactly this pin + series."""
    return is_applied(repo, digest) and not dirty_files(repo)


def _failure_detail(stderr: str, patch: Patch, entry: SeriesEntry, up: Upstream) -> str:
    """Name the file and hunk that failed from git am's stderr."""
    where = f"{entry.name} ({up.series_dir}/series:{entry.line})"
    match = re.search(r"error: patch failed: (.+):(\d+)", stderr)
    if match:
        path, start = match.group(1), int(match.group(2))
        for diff in patch.files:
            if diff.old_path == path:
                for hunk in diff.hunks:
                    if hunk.old_start == start:
                        return f"{where}: {path}: hunk {hunk.range_text} ({entry.name}:{hunk.line}) does not apply"
        return f"{where}: {path}: hunk at line {start} does not apply"
    match = re.search(
        r"error: (.+?): (does not exist in index|already exists in (?:index|working directory)|does not match index|patch does not apply)",
        stderr,
    )
    if match:
        return f"{where}: {match.group(1)}: {match.group(2)}"
    lines = [ln for ln in stderr.splitlines() if ln.startswith(("error:", "fatal:"))]
    return f"{where}: {lines[0] if lines else 'git am failed'}"


def run_am(repo: Path, up: Upstream, series_dir: Path, series: Series, pin: str) -> None:
    """`git am` the series, grouped by author so committer = author, date = author date."""
    groups: list[Series] = []
    for pair in series:
        author = (pair[1].author_name, pair[1].author_email)
        if groups and (groups[-1][0][1].author_name, groups[-1][0][1].author_email) == author:
            groups[-1].append(pair)
        else:
            groups.append([pair])
    for group in groups:
        env = {
            "GIT_COMMITTER_NAME": group[0][1].author_name,
            "GIT_COMMITTER_EMAIL": group[0][1].author_email,
        }
        files = [str(series_dir / entry.name) for entry, _ in group]
        try:
            git(["am", *_AM_OPTS, *files], repo, env=env)
        except GitError as exc:
            done = int(git_text(["rev-list", "--count", f"{pin}..HEAD"], repo))
            if done >= len(series):  # every patch committed, then git failed (a full disk)
                why = [ln for ln in exc.stderr.splitlines() if ln.startswith(("error:", "fatal:"))]
                raise PatchToolError(
                    f"{up.name}: git am failed after the last patch: "
                    f"{why[-1] if why else 'exit ' + str(exc.returncode)}; checkout restored; "
                    "fix the cause (disk space?) and re-run apply"
                ) from exc
            entry, patch = series[done]
            detail = _failure_detail(exc.stderr, patch, entry, up)
            raise PatchToolError(
                f"{up.name}: patch {done + 1}/{len(series)} {detail} on {up.tag or pin[:12]} "
                f"(strict: no fuzz, no 3-way); checkout restored; next step: "
                f"tools/patches rebase {up.name} --to <ref>, or fix {entry.name}"
            ) from exc


def _restore(repo: Path, ref: str, head: str, refs: dict[str, str], stash: str) -> None:
    """Put HEAD, refs, index, worktree (and stashed changes) back as they were."""
    am_dir = repo / git_text(["rev-parse", "--git-path", "rebase-apply"], repo)
    if am_dir.exists():
        git(["am", "--abort"], repo, check=False)
    if am_dir.exists():  # --abort can fail (e.g. blobs a partial mirror lacks); the state is ours
        shutil.rmtree(am_dir)
    for name, value in refs.items():
        if value:
            git(["update-ref", name, value], repo)
        else:
            git(["update-ref", "-d", name], repo, check=False)
    git(["checkout", "-q", "-f", "--detach", head], repo)
    if ref:
        git(["symbolic-ref", "HEAD", ref], repo)
    git(["reset", "-q", "--hard", "HEAD"], repo)
    if stash:
        git(["stash", "pop", "--index", "-q"], repo)


def retire_proxy_if_exact(root: Path, up: Upstream, source: Source) -> str:
    """A proxy is never used when the exact source is available: remove a proxy stand-in
    (only tool-made state) when the URL answers, so the clone replaces it; returns a note.

    Not when this stand-in was laid out because that very URL answered but could not give the
    pin (e.g. a mirror lacking blobs): that is tried once, not on every run (a no-op stays one).
    """
    if not source.proxy:
        return ""
    repo = checkout_dir(root, up)
    if clone_failed(repo, effective_url(root, up.url), up.commit):
        return ""
    ok, _ = url_answers(root, up)
    if not ok:
        return ""
    heads = git_text(["for-each-ref", "--format=%(refname)", "refs/heads/"], repo).splitlines()
    foreign = [h for h in heads if h not in ("refs/heads/standin", BRANCH_REF)]
    branch = rev(repo, BRANCH_REF)
    if branch and branch not in (rev(repo, APPLIED_REF), source.pin):
        foreign.append(BRANCH_REF)
    if foreign or dirty_files(repo):
        raise PatchToolError(
            f"{up.name}: {up.path} is a proxy stand-in ({source.spec}) but the exact source "
            f"{up.url} answers now, and the stand-in holds work of yours (changes or branches "
            f"{', '.join(foreign) or 'uncommitted'}); move it away (mv {up.path} /tmp/) and "
            "re-run: a proxy is never used when the pin itself is available"
        )
    shutil.rmtree(repo)
    return f"removed the proxy stand-in {source.spec}: the exact source answers"


def apply_upstream(
    root: Path, up: Upstream, *, force: bool = False, downloader: Downloader = pip_download
) -> Outcome:
    """Apply `up`'s series on its pin as branch `patched`; see the module docstring."""
    series_dir = root / up.series_dir
    series = load_series(series_dir)
    check_safe_paths(up, series, None)
    repo = checkout_dir(root, up)
    digest = series_digest(up, series_dir, series)
    detected = detect_source(root, up) if is_repo(repo) else None
    retired = retire_proxy_if_exact(root, up, detected) if detected else ""
    if retired:
        detected = None
    if detected and is_noop(repo, digest):
        return _unchanged(up, repo, detected, series)
    source = ensure_source(root, up, downloader, detected=detected)
    if source.kind == MISSING:
        return Outcome(
            up.name,
            State.NOT_VERIFIED,
            f"series of {len(series)} patches NOT verified here: {source.detail}",
            len(series),
        )
    check_safe_paths(up, series, repo)
    checks: list[ProxyCheck] = []
    if source.proxy:
        checks = check_series(repo, source.pin, series)
        series = [pair for pair, check in zip(series, checks, strict=True) if check.applies]
    elif source.kind == STANDIN:
        check_preimages(repo, source.pin, up, series)
    refuse_in_progress(repo, up)
    saved = guard_branch(repo, up, source.pin, force, series)
    stash = refuse_or_stash(repo, up, force, "apply")
    ref, head = head_of(repo)
    refs = _refs(repo, (BRANCH_REF, APPLIED_REF, PIN_REF))
    try:
        git(["checkout", "-q", "--detach", source.pin], repo)
        run_am(repo, up, series_dir, series, source.pin)
        new_head = git_text(["rev-parse", "HEAD"], repo)
        updates = f"update {BRANCH_REF} {new_head}\nupdate {APPLIED_REF} {new_head}\n"
        updates += f"update {PIN_REF} {source.pin}\n"
        git(["update-ref", "-m", "tools/patches apply", "--stdin"], repo, input=updates)
        git(["symbolic-ref", "HEAD", BRANCH_REF], repo)
        record_applied(repo, digest, [entry.name for entry, _ in series])
    except BaseException:
        _restore(repo, ref, head, refs, stash)
        raise
    notes = [] if not retired else [retired]
    notes.append(f"branch {BRANCH} at {new_head[:12]}")
    if saved:
        notes.append(f"previous {BRANCH} kept as branch {saved}")
    if stash:
        notes.append(f"uncommitted changes stashed as {stash[:12]} (git -C {up.path} stash pop)")
    if source.proxy:
        outcome = _proxy_outcome(up, source.spec, checks, State.APPLIED, "; ".join(notes), new_head)
        outcome.stash = stash
        return outcome
    first = f"applied {len(series)} patches on {up.tag or up.commit[:12]} ({source.detail})"
    return Outcome(up.name, State.APPLIED, "; ".join([first, *notes]), len(series), new_head, stash)


def _unchanged(up: Upstream, repo: Path, source: Source, series: Series) -> Outcome:
    """The outcome of a run that found this pin + series applied already (a no-op)."""
    head = rev(repo, "HEAD")
    if source.proxy:
        checks = check_series(repo, source.pin, series)
        return _proxy_outcome(up, source.spec, checks, State.UNCHANGED, "already applied", head)
    return Outcome(
        up.name,
        State.UNCHANGED,
        f"already applied ({len(series)} patches), nothing to do",
        len(series),
        head,
    )


def _proxy_outcome(
    up: Upstream, spec: str, checks: list[ProxyCheck], state: State, note: str, head: str
) -> Outcome:
    """The outcome on a proxy: says PROXY, counts what applied, labels every patch."""
    applied = sum(1 for c in checks if c.applies)
    left_out = [c.patch for c in checks if not c.applies]
    message = (
        f"PROXY {proxy_name(up)}, NOT the pinned commit: {applied} of {len(checks)} patches "
        f"on {spec}" + (f"; {note}" if note else "")
    )
    if left_out:
        state = State.NOT_VERIFIED
        message += f"; NOT verified here (do not apply on the proxy): {', '.join(left_out)}"
    return Outcome(up.name, state, message, len(checks), head, proxy=proxy_name(up), checks=checks)


def reset_upstream(root: Path, up: Upstream, *, force: bool = False) -> Outcome:
    """Check out the pinned commit (detached), with the same dirty-tree rule as apply."""
    repo = checkout_dir(root, up)
    source = detect_source(root, up)
    if source.kind == MISSING or not source.pin:
        return Outcome(up.name, State.NOT_VERIFIED, f"nothing to reset: {source.detail}")
    stash = refuse_or_stash(repo, up, force, "reset")
    before = rev(repo, "HEAD")
    git(["checkout", "-q", "--detach", source.pin], repo)
    # Branch `patched` and refs/patchtool/applied stay: a later apply recognises its own work.
    note = f"at pin {source.pin[:12]} (was {before[:12]})"
    if stash:
        note += f"; uncommitted changes stashed as {stash[:12]}"
    return Outcome(up.name, State.RESET, note, 0, source.pin, stash)


def wire_after_apply(root: Path, manifest: Manifest, outcome: Outcome) -> Outcome:
    """apply's last step, once every upstream is in place: link the upstream's nested
    `[tool.uv.sources]` paths to our checkouts (source/nested_wiring.py). A refusal makes the
    outcome an ERROR that still says what the series step did."""
    if outcome.state == State.ERROR:
        return outcome
    try:
        states = wire_host(root, manifest, manifest.upstreams[outcome.name])
    except PatchToolError as exc:
        outcome.state = State.ERROR
        outcome.message = f"{outcome.message}; nested wiring refused: {exc}"
        return outcome
    outcome.wiring = [s.as_dict() for s in states]
    outcome.wiring_lines = [s.line() for s in states if s.made or s.state == NO_TARGET]
    return outcome


def unwire_after_reset(root: Path, manifest: Manifest, outcome: Outcome) -> Outcome:
    """reset's last step: remove the nested links apply made in this upstream's checkout (also
    where there was no pin to go back to; not where reset refused: then nothing changes)."""
    if outcome.state == State.ERROR:
        return outcome
    try:
        removed = unwire_host(root, manifest, manifest.upstreams[outcome.name])
    except PatchToolError as exc:
        outcome.state = State.ERROR
        outcome.message = f"{outcome.message}; removing nested links failed: {exc}"
        return outcome
    outcome.wiring_lines = [f"{path}: link removed" for path in removed]
    return outcome
