"""`status`: per upstream, the pin, where the source came from, and what state HEAD is in."""

from __future__ import annotations

from pathlib import Path

from ..errors import PatchToolError
from ..git.git import git_ok, git_text, rev
from ..model.manifest import Upstream
from ..model.series import Patch, SeriesEntry, load_series
from .checkout import (
    BRANCH,
    BRANCH_REF,
    checkout_dir,
    dirty_files,
    is_applied,
    series_digest,
)
from .detect import MISSING, STANDIN, detect_source
from .gitlinks import committed_gitlink, staged_gitlink
from .proxy import check_series, proxy_name


def _applied_count(repo: Path, pin: str, series: list[tuple[SeriesEntry, Patch]]) -> int:
    """How many series patches, in order, are the commits pin..HEAD (matched by subject)."""
    if not git_ok(["merge-base", "--is-ancestor", pin, "HEAD"], repo):
        return 0
    subjects = git_text(["log", "--reverse", "--format=%s", f"{pin}..HEAD"], repo).splitlines()
    count = 0
    for subject, (_, patch) in zip(subjects, series, strict=False):
        if subject != " ".join(patch.subject.split()):
            break
        count += 1
    return count


def upstream_status(root: Path, up: Upstream) -> dict[str, object]:
    """Everything `status` shows for one upstream, as plain data."""
    source = detect_source(root, up)
    row: dict[str, object] = {
        "name": up.name,
        "path": up.path,
        "tag": up.tag,
        "commit": up.commit,
        "source": source.kind,
        "source_detail": source.detail,
        "gitlink_staged": staged_gitlink(root, up),
        "gitlink_committed": committed_gitlink(root, up),
        "proxy": proxy_name(up) if source.proxy else "",
        "patch_labels": [],
    }
    try:
        series = load_series(root / up.series_dir)
        row["patches_total"] = len(series)
    except PatchToolError as exc:
        series, row["patches_total"], row["series_error"] = [], None, str(exc)
    if source.kind == MISSING:
        row.update(head="", branch="", patches_applied=0, clean=None, dirty_files=[])
        row.update(patched_state=False, note=f"missing: series NOT verified here ({source.detail})")
        return row
    repo = checkout_dir(root, up)
    ref = git_text(["symbolic-ref", "-q", "HEAD"], repo, check=False)
    head = rev(repo, "HEAD")
    dirty = dirty_files(repo)
    current = (
        series_digest(up, root / up.series_dir, series) if row["patches_total"] is not None else ""
    )
    expected = is_applied(repo, current)
    if source.proxy and source.pin and series:
        # On a proxy only the patches that apply there are on the branch; each is labelled.
        checks = check_series(repo, source.pin, series)
        row["patch_labels"] = [c.as_dict() for c in checks]
        series = [pair for pair, c in zip(series, checks, strict=True) if c.applies]
    applied = (
        len(series) if expected else _applied_count(repo, source.pin, series) if source.pin else 0
    )
    if ref == BRANCH_REF:
        note = f"on branch {BRANCH} (HEAD is NOT the pin: do not commit this gitlink)"
    elif head == source.pin:
        note = "detached at the pin (unpatched)"
    else:
        note = (
            f"HEAD {head[:12]} is neither the pin nor the applied series: run tools/patches apply"
        )
    if source.kind == STANDIN:
        note += f"; {source.detail}"
    if not expected and ref == BRANCH_REF:
        note += "; series or pin changed since apply: run tools/patches apply"
    row.update(head=head, branch=ref.removeprefix("refs/heads/"), patches_applied=applied)
    row.update(clean=not dirty, dirty_files=dirty, patched_state=expected, note=note)
    return row
