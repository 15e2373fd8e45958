"""`upstream-check`: would each patch pass the upstream's own formatters, linters, DCO and
copyright rules?

A patch is PR-ready only if the upstream's CI accepts it. For every patch of a series this runs
the upstream's pre-commit formatters/linters (ruff, black, isort, whitespace hooks) at the
versions its `.pre-commit-config.yaml` pins, with its own configuration, on the files the patch
touches, as they are in the patch's commit on branch `patched`; plus the DCO rule (a
`Signed-off-by:` by the author) where the upstream's CONTRIBUTING.md asks for it, and the
upstream's copyright header on every Python file the patch adds (config.COPYRIGHT_RULES).

Formatters run through `uv tool run --from <tool>==<version>` (PyPI only), reading the file on
stdin with `--stdin-filename`, from the checkout's root: the checkout's config files, excludes and
first-party detection apply, and nothing is written into the checkout. A finding the same file
already had before the patch (its parent commit) is reported as pre-existing and does not fail.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import format_patch, git_bytes, git_ok, git_text, patch_id
from ..model.manifest import Upstream
from ..model.series import Patch, load_series
from ..model.trailers import adopted_pr
from ..source.checkout import checkout_dir, dirty_files
from ..source.detect import MISSING, detect_source
from .config import load_checks
from .copyright import copyright_findings, copyright_rule, patch_year
from .dco import dco_findings, signoff_rule
from .model import COPYRIGHT, Check, CheckState, CopyrightRule, Finding, PatchReport, UpstreamReport
from .runner import ToolRunner, find_uv

# --- per upstream -------------------------------------------------------------------------


def _blob(repo: Path, commit: str, path: str) -> bytes | None:
    if not git_ok(["cat-file", "-e", f"{commit}:{path}"], repo):
        return None
    out = git_bytes(["show", f"{commit}:{path}"], repo)
    return out


def _check_file(
    runner: ToolRunner, check: Check, path: str, data: bytes, before: bytes | None
) -> list[Finding]:
    """Findings of `check` on the patched `data`; those `before` (the parent) had are marked."""
    found = runner.run(check, path, data)
    if not found:
        return []
    baseline = Counter(key for *_, key in runner.run(check, path, before)) if before else Counter()
    findings: list[Finding] = []
    for line, message, detail, key in found:
        old = baseline[key] > 0
        baseline[key] -= 1 if old else 0
        findings.append(Finding(check.label, path, line, message, old, detail))
    return findings


def patch_commits(repo: Path, pin: str, series: list[Patch], up: Upstream) -> list[str]:
    """The commit of each patch on top of the pin; raise unless pin..HEAD is exactly the series.

    Matched by content (`git patch-id`), so a checkout whose patches were applied by hand with
    `git am` qualifies, and a commit edited since its patch was exported does not.
    """
    commits = git_text(["rev-list", "--reverse", "--topo-order", f"{pin}..HEAD"], repo).split()
    fix = f"run `tools/patches apply {up.name}` (or `tools/patches export {up.name}`)"
    if len(commits) != len(series):
        raise PatchToolError(
            f"{up.path}: {len(commits)} commit(s) on top of the pin but the series has "
            f"{len(series)} patch(es): {fix}"
        )
    for commit, patch in zip(commits, series, strict=True):
        if patch_id(repo, format_patch(repo, f"{commit}~1..{commit}")) != patch_id(
            repo, patch.path.read_bytes()
        ):
            raise PatchToolError(
                f"{up.path}: commit {commit[:12]} differs from {patch.path.name} (patch-id): "
                f"the checkout is not the patched state of the series; {fix}"
            )
    return commits


def _check_files(
    result: PatchReport,
    patch: Patch,
    repo: Path,
    commits: tuple[str, str],
    runner: ToolRunner,
    checks: list[Check],
    header_rule: CopyrightRule | None,
) -> None:
    """The checks on each file of `patch` as its commit has it (`commits`: it and its parent)."""
    commit, parent = commits
    result.files = [f.path for f in patch.files if not f.is_deleted and not f.binary]
    new = {f.path for f in patch.files if f.is_new}
    for path in result.files:
        data = _blob(repo, commit, path)
        if data is None or _blob(repo, "HEAD", path) is None:
            result.notes.append(f"{path}: not in the patched tree (a later patch removes it)")
            continue
        if header_rule and path in new and path.endswith(".py"):
            if COPYRIGHT not in result.ran:
                result.ran.append(COPYRIGHT)
            result.findings += copyright_findings(header_rule, path, data, patch_year(patch))
        before = _blob(repo, parent, path)
        for check in checks:
            if check.applies(path, data):
                if check.label not in result.ran:
                    result.ran.append(check.label)
                result.findings += _check_file(runner, check, path, data, before)


def check_upstream(root: Path, up: Upstream, uv: str | None = None) -> UpstreamReport:
    """Run the upstream's own checks on every patch of `up`'s applied series."""
    start = time.monotonic()
    source = detect_source(root, up)
    report = UpstreamReport(up.name, source.kind, CheckState.CHECKED, source.detail)
    series = load_series(root / up.series_dir)
    repo = checkout_dir(root, up)
    if source.kind == MISSING:
        report.state, report.detail = CheckState.NOT_CHECKED, f"not checked here: {source.detail}"
        report.unchecked.append(report.detail)
        return report
    if not series:
        report.state = CheckState.NO_PATCHES
        return report
    dirty = dirty_files(repo)
    if dirty:
        raise PatchToolError(
            f"{up.path} has uncommitted changes ({', '.join(d[3:] for d in dirty[:3])}): the "
            "checks read the config from the work tree; commit, stash or `tools/patches apply`"
        )
    commits = patch_commits(repo, source.pin, [patch for _, patch in series], up)
    checks, report.not_run, why = load_checks(repo, up, source)
    if why:
        report.unchecked.append(why)
    report.checks = [f"{c.label} from {c.origin}" for c in checks]
    signoff, report.dco = signoff_rule(repo, up, source)
    if signoff is None:
        report.unchecked.append(report.dco)
    header_rule, report.copyright = copyright_rule(up.name)
    runner = ToolRunner(uv or (find_uv() if checks else ""), repo)  # no formatter: no uv
    for index, (_, patch) in enumerate(series):
        commit, parent = commits[index], commits[index - 1] if index else source.pin
        result = PatchReport(
            patch.path.name, [], adopted=adopted_pr(patch.trailer_values("Origin"))
        )
        if signoff:
            result.ran.append("dco")
            result.findings += dco_findings(patch, patch.path.relative_to(root).as_posix())
        _check_files(result, patch, repo, (commit, parent), runner, checks, header_rule)
        report.patches.append(result)
    if report.unchecked and not checks:
        report.state = CheckState.NOT_CHECKED
    report.seconds = round(time.monotonic() - start, 2)
    return report
