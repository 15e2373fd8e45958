"""`lint`: series/patch consistency, trailers, tripwire tests, path safety, gitlink pins.

Errors print as `file:line: message` (paths relative to the repository root) so editors and
pre-commit jump straight to them. Parsing of tests is stdlib `ast`, never a pytest import.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import PatchToolError
from ..model.manifest import MANIFEST_PATH, Manifest, Upstream, standin_problems
from ..model.paths import patch_path_problems
from ..model.ports import PORT_DIR, port_problems
from ..model.series import RETIRED_DIR, SERIES_FILE, Patch, parse_patch, read_series
from ..model.test_suites import UPSTREAM_TEST_KEY, UpstreamSuite, load_suites
from ..model.trailers import FEATURE, FIX, KIND_KEY
from ..source.checkout import checkout_dir, is_repo
from ..source.gitlinks import gitlink_problems

STATUS_RE = re.compile(
    r"^(pending|submitted https?://\S+|accepted \S+|not-needed \S.*|inappropriate \S.*)$"
)
TEST_RE = re.compile(r"^(?P<file>[^\s:]+\.py)(?P<names>(::[A-Za-z_]\w*)+)(\[.*\])?$")
SINGLE_TRAILERS = ("Upstream-Status", "Origin")
DEPENDS_KEY = "Depends-On"
DEPENDS_RE = re.compile(r"^(?P<upstream>[A-Za-z0-9._-]+)/(?P<patch>[^/\s]+\.patch)$")
_FULL_BLOB_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


@dataclass(frozen=True)
class LintError:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


def test_exists(root: Path, node: str) -> str | None:
    """Why pytest node id `node` does not name an existing test, or None if it does."""
    match = TEST_RE.match(node)
    if not match:
        return f"Test: {node!r} is not a pytest node id (tests/path/test_x.py::test_name)"
    path = root / match.group("file")
    if not path.is_file():
        return f"Test: {match.group('file')} does not exist"
    try:
        scope: list[ast.stmt] = ast.parse(path.read_bytes(), str(path)).body
    except SyntaxError as exc:
        return f"Test: {match.group('file')} does not parse ({exc.msg}, line {exc.lineno})"
    names = match.group("names").split("::")[1:]
    for depth, name in enumerate(names):
        last = depth == len(names) - 1
        kinds = (ast.FunctionDef, ast.AsyncFunctionDef) if last else (ast.ClassDef,)
        found = next((n for n in scope if isinstance(n, kinds) and n.name == name), None)
        if found is None:
            what = "def" if last else "class"
            return f"Test: no `{what} {name}` in {match.group('file')}"
        if not last:
            assert isinstance(found, ast.ClassDef)
            scope = found.body
    return None


def lint_patch(
    root: Path,
    rel: str,
    patch: Patch,
    checkout: Path | None,
    suite: UpstreamSuite | None = None,
) -> list[LintError]:
    errors = [LintError(rel, line, msg) for line, msg in patch.problems]
    if patch.quilt_line:
        name = Path(rel).parent.name
        errors.append(
            LintError(
                rel,
                patch.quilt_line,
                "diff in quilt's format (quilt refresh: no `diff --git`/`index` lines); it "
                f"still applies, to get the canonical bytes back run: tools/patches apply {name} "
                f"&& tools/patches export {name}",
            )
        )
    errors += [LintError(rel, line, msg) for line, msg in patch_path_problems(patch, checkout)]
    errors += _trailer_errors(root, rel, patch)
    if suite is not None:
        errors += upstream_test_errors(rel, patch, suite)
    for diff in patch.files:
        for blob in (diff.old_blob, diff.new_blob):
            if blob and not _FULL_BLOB_RE.match(blob):
                errors.append(
                    LintError(
                        rel,
                        diff.line,
                        f"abbreviated blob id {blob}: export with --full-index (tools/patchtool/git/git.py:format_patch)",
                    )
                )
                break
        for hunk in diff.hunks:
            for line, text in hunk.added:
                if text != text.rstrip():
                    errors.append(
                        LintError(rel, line, f"trailing whitespace on an added line of {diff.path}")
                    )
    return errors


def _trailer_errors(root: Path, rel: str, patch: Patch) -> list[LintError]:
    """The trailer block: each required key once, a known Upstream-Status, a Test that exists."""
    errors: list[LintError] = []
    keys = {t.key for t in patch.trailers}
    end = patch.body[-1][0] if patch.body else max(patch.subject_line, 1)
    for key in (*SINGLE_TRAILERS, "Test"):
        if key not in keys:
            errors.append(
                LintError(
                    rel, end, f"missing trailer `{key}:` (one block at the end of the message)"
                )
            )
    counted: set[str] = set()
    for trailer in patch.trailers:
        where = trailer.line
        if trailer.key in SINGLE_TRAILERS and trailer.key in counted:
            errors.append(LintError(rel, where, f"`{trailer.key}:` given more than once"))
        counted.add(trailer.key)
        if trailer.key == "Upstream-Status" and not STATUS_RE.match(trailer.value):
            errors.append(
                LintError(
                    rel,
                    where,
                    f"Upstream-Status {trailer.value!r}: want pending | submitted <PR URL> | accepted <commit or tag> | not-needed <reason> | inappropriate <reason>",
                )
            )
        elif trailer.key in ("Origin", "Bug") and not trailer.value:
            errors.append(LintError(rel, where, f"`{trailer.key}:` is empty"))
        elif trailer.key.lower() == KIND_KEY.lower() and trailer.value.lower() not in (
            FEATURE,
            FIX,
        ):
            why = f"{KIND_KEY}: {trailer.value!r}: want {FEATURE} | {FIX} (the linked issue's template)"
            errors.append(LintError(rel, where, why))
        elif trailer.key == "Test":
            why = test_exists(root, trailer.value)
            if why:
                errors.append(LintError(rel, where, why))
    return errors


def upstream_test_errors(rel: str, patch: Patch, suite: UpstreamSuite) -> list[LintError]:
    """The patch carries its upstream-native test: `Upstream-Test:` nodes in a test file the
    patch itself adds or changes under the upstream's tests (what its PR will show)."""
    end = patch.body[-1][0] if patch.body else max(patch.subject_line, 1)
    nodes = [t for t in patch.trailers if t.key.lower() == UPSTREAM_TEST_KEY.lower()]
    listed = patch.path.name in suite.pending
    if listed and nodes:
        return [
            LintError(
                rel,
                nodes[0].line,
                f"{patch.path.name} has its `{UPSTREAM_TEST_KEY}:` now: remove it from `pending` "
                f"in patches/upstream-tests.toml [{suite.upstream}]",
            )
        ]
    if listed:
        return []
    if not nodes:
        return [
            LintError(
                rel,
                end,
                f"missing trailer `{UPSTREAM_TEST_KEY}:` (the upstream-native test the patch "
                f"adds under {suite.tests_root}/, as a pytest node id from the upstream root)",
            )
        ]
    changed = {f.path for f in patch.files if not f.is_deleted}
    errors = []
    for trailer in nodes:
        match = TEST_RE.match(trailer.value)
        if not match:
            why = f"{UPSTREAM_TEST_KEY}: {trailer.value!r} is not a pytest node id (tests/.../test_x.py::test_name)"
        elif not suite.is_test_file(match.group("file")):
            why = f"{UPSTREAM_TEST_KEY}: {match.group('file')} is not under the upstream's {suite.test_top}/"
        elif match.group("file") not in changed:
            why = (
                f"{UPSTREAM_TEST_KEY}: {match.group('file')} is not a file this patch adds or "
                "changes: the PR must carry its test"
            )
        else:
            continue
        errors.append(LintError(rel, trailer.line, why))
    return errors


def depends_errors(
    root: Path, rel: str, patch: Patch, earlier: set[str], manifest: Manifest
) -> list[LintError]:
    """`Depends-On: <Upstream>/<patch>` names an active patch; in the same upstream, an earlier one."""
    errors = []
    own = Path(rel).parent.name
    for trailer in (t for t in patch.trailers if t.key.lower() == DEPENDS_KEY.lower()):
        match = DEPENDS_RE.match(trailer.value)
        if not match or match.group("upstream") not in manifest.upstreams:
            why = f"{DEPENDS_KEY}: {trailer.value!r}: want <Upstream>/<patch file>, Upstream one of {', '.join(manifest.upstreams)}"
        elif match.group("upstream") == own and match.group("patch") not in earlier:
            why = f"{DEPENDS_KEY}: {match.group('patch')} is not earlier in patches/{own}/series"
        elif not (root / "patches" / match.group("upstream") / match.group("patch")).is_file():
            why = f"{DEPENDS_KEY}: patches/{trailer.value} does not exist"
        else:
            continue
        errors.append(LintError(rel, trailer.line, why))
    return errors


def lint_upstream(
    root: Path,
    up: Upstream,
    manifest: Manifest | None = None,
    suite: UpstreamSuite | None = None,
) -> list[LintError]:
    series_dir = root / up.series_dir
    series_rel = (up.series_dir / SERIES_FILE).as_posix()
    try:
        entries = read_series(series_dir / SERIES_FILE)
    except PatchToolError as exc:
        return [LintError(series_rel, 1, str(exc))]
    errors: list[LintError] = []
    checkout = checkout_dir(root, up)
    checkout_or_none = checkout if is_repo(checkout) else None
    seen: dict[str, int] = {}
    for entry in entries:
        if entry.name in seen:
            errors.append(
                LintError(
                    series_rel,
                    entry.line,
                    f"{entry.name} listed twice (first on line {seen[entry.name]})",
                )
            )
            continue
        seen[entry.name] = entry.line
        path = series_dir / entry.name
        if "/" in entry.name or not entry.name.endswith(".patch"):
            errors.append(
                LintError(
                    series_rel,
                    entry.line,
                    f"{entry.name}: series entries are file names ending in .patch",
                )
            )
        if not path.is_file():
            errors.append(
                LintError(
                    series_rel, entry.line, f"{entry.name} listed but the file does not exist"
                )
            )
            continue
        rel = (up.series_dir / entry.name).as_posix()
        patch = parse_patch(path)
        errors += lint_patch(root, rel, patch, checkout_or_none, suite)
        if manifest is not None:
            errors += depends_errors(root, rel, patch, set(seen) - {entry.name}, manifest)
    for path in sorted(series_dir.glob("*.patch")):
        if path.name not in seen:
            rel = (up.series_dir / path.name).as_posix()
            errors.append(
                LintError(
                    rel, 1, f"not listed in {series_rel}: add it or move it to {RETIRED_DIR}/"
                )
            )
    return errors + _port_errors(root, up, checkout_or_none, set(seen))


def _port_errors(
    root: Path, up: Upstream, checkout: Path | None, names: set[str]
) -> list[LintError]:
    """Ports onto main (model/ports.py): each a well-formed patch whose commit is its pin
    patch's, and none without a pin patch in the series."""
    series_dir = root / up.series_dir
    errors = []
    for path in sorted((series_dir / PORT_DIR).glob("*.patch")):
        if path.name in names:
            rel = (up.series_dir / PORT_DIR / path.name).as_posix()
            errors += lint_patch(root, rel, parse_patch(path), checkout)
    for path, line, why in port_problems(series_dir, names):
        errors.append(LintError(path.relative_to(root).as_posix(), line, why))
    return errors


def lint_all(root: Path, manifest: Manifest, names: list[str] | None = None) -> list[LintError]:
    errors: list[LintError] = []
    suites = load_suites(root)
    for up in manifest.select(names):
        errors += lint_upstream(root, up, manifest, suites.get(up.name))
        for problem in gitlink_problems(root, up):
            errors.append(LintError(MANIFEST_PATH.as_posix(), up.commit_line or up.line, problem))
        for problem in standin_problems(up):
            errors.append(LintError(MANIFEST_PATH.as_posix(), up.line, problem))
    known = set(manifest.upstreams)
    for path in sorted((root / "patches").iterdir()):
        if path.is_dir() and path.name not in known:
            errors.append(
                LintError(f"patches/{path.name}", 1, f"no [{path.name}] in {MANIFEST_PATH}")
            )
    return errors
