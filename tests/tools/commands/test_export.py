"""`export` / `export --check`: byte-stable regeneration of patch files from branch `patched`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.repos import (
    commit,
    init_repo,
    make_patch,
    make_superproject,
    numbered,
    run,
    trailers,
)
from tools.patchtool.apply.apply import apply_upstream
from tools.patchtool.cli import main
from tools.patchtool.model.manifest import load_manifest

pytestmark = pytest.mark.usefixtures("isolated_git")


MOD = "pkg/mod.py"

# Settings a user may have that change what `git format-patch` prints when not pinned.
HOSTILE = """
[core]
    abbrev = 7
    attributesFile = {attrs}
[diff]
    noprefix = true
    mnemonicPrefix = true
    renames = false
    algorithm = patience
    context = 8
    interHunkContext = 10
    indentHeuristic = false
    orderFile = {order}
    suppressBlankEmpty = true
    relative = true
    external = false
[format]
    signature = hostile
    numbered = true
    from = Someone Else <else@example.invalid>
    notes = true
    pretty = oneline
    subjectPrefix = HOSTILE
    coverLetter = true
    signOff = true
    useAutoBase = true
    thread = deep
    headers = X-Hostile: 1
    mboxrd = true
[color]
    ui = always
[log]
    showSignature = true
    decorate = full
[i18n]
    logOutputEncoding = ISO-8859-1
"""


@pytest.fixture
def superproject(tmp_path: Path) -> Path:
    upstream = tmp_path / "upstream"
    init_repo(upstream, {MOD: numbered(40), "pkg/b.py": numbered(10, "b")})
    first = make_patch(
        upstream,
        "v1",
        {MOD: [*numbered(40)[:20], "patched 21 with `$(x)` and 'quotes'", *numbered(40)[21:]]},
        'fix "one": handle `$(rm -rf /)`',
        trailers(),
    )
    second = make_patch(upstream, "v1", {"pkg/b.py": numbered(11, "b")}, "fix two", trailers())
    root = make_superproject(
        tmp_path / "super", upstream, patches=[("one.patch", first), ("two.patch", second)]
    )
    up = load_manifest(root).upstreams["Up"]
    apply_upstream(root, up)
    return root


def export(root: Path, *args: str) -> int:
    return main(["--root", str(root), "export", *args])


def test_check_passes_on_fresh_apply_and_export_is_a_noop(
    superproject: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (superproject / "patches/Up/one.patch").read_bytes()
    assert export(superproject, "--check") == 0
    assert "2 patch files match" in capsys.readouterr().out
    assert export(superproject) == 0
    assert export(superproject) == 0
    assert (superproject / "patches/Up/one.patch").read_bytes() == before


def test_export_is_byte_stable_under_hostile_git_config(
    superproject: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attrs = tmp_path / "attrs"
    attrs.write_text("*.py diff=hostile\n")
    order = tmp_path / "order"
    order.write_text("pkg/mod.py\npkg/b.py\n")
    hostile = tmp_path / "hostile.gitconfig"
    hostile.write_text(
        HOSTILE.format(attrs=attrs, order=order)
        + '[diff "hostile"]\n    xfuncname = "^(line 1.*)$"\n'
    )
    expected = {p.name: p.read_bytes() for p in (superproject / "patches/Up").glob("*.patch")}
    run(["notes", "add", "-m", "hostile note", "patched"], superproject / "3rdparty/Up")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(hostile))
    # The hostile config is really in effect for git here.
    assert (
        run(["config", "core.abbrev"], superproject, env={"GIT_CONFIG_GLOBAL": str(hostile)}) == "7"
    )
    assert export(superproject, "--check") == 0
    assert export(superproject) == 0
    got = {p.name: p.read_bytes() for p in (superproject / "patches/Up").glob("*.patch")}
    assert got == expected


def test_check_fails_with_diff_after_commit_edit_then_export_fixes_it(
    superproject: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkout = superproject / "3rdparty/Up"
    # Edit patch one = edit its commit: reword it on branch `patched`.
    run(["rebase", "-q", "--exec", "true", "HEAD~2"], checkout)
    first = run(["rev-list", "--reverse", "HEAD~2..HEAD"], checkout).splitlines()[0]
    run(["checkout", "-q", first], checkout)
    run(["commit", "-q", "--amend", "-m", "fix one, reworded\n\nNew why.\n\nTest: t::x"], checkout)
    new_first = run(["rev-parse", "HEAD"], checkout)
    run(["checkout", "-q", "patched"], checkout)
    run(["rebase", "-q", "--onto", new_first, first, "patched"], checkout)
    capsys.readouterr()
    assert export(superproject, "--check") == 1
    out = capsys.readouterr().out
    assert "+Subject: fix one, reworded" in out and "differ from a fresh export" in out
    assert export(superproject) == 0
    assert "Subject: fix one, reworded" in (superproject / "patches/Up/one.patch").read_text()
    assert export(superproject, "--check") == 0


def test_new_commit_becomes_a_new_patch_appended_to_series(superproject: Path) -> None:
    checkout = superproject / "3rdparty/Up"
    commit(checkout, "Add: a brand-new fix!", {"pkg/c.py": ["c"]})
    assert export(superproject, "--check") == 1
    assert export(superproject) == 0
    series = (superproject / "patches/Up/series").read_text().splitlines()
    assert series == ["one.patch", "two.patch", "add-a-brand-new-fix.patch"]
    assert (
        (superproject / "patches/Up/add-a-brand-new-fix.patch")
        .read_bytes()
        .startswith(b"From 0000")
    )
    assert export(superproject, "--check") == 0


def test_check_reports_not_verified_without_patched_branch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = tmp_path / "upstream"
    init_repo(upstream, {MOD: numbered(40)})
    data = make_patch(upstream, "v1", {MOD: numbered(41)}, "fix", trailers())
    root = make_superproject(tmp_path / "super", upstream, patches=[("a.patch", data)])
    assert export(root, "--check") == 3
    assert "NOT verified" in capsys.readouterr().out
    assert export(root, "--check", "--allow-missing") == 0


def test_a_name_that_joined_the_series_after_apply_stops_export(
    superproject: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """one.patch replaced in the series by theirs.patch (as `adopt --replaces` does) with the
    branch not re-applied: its first commit is still one.patch's, and exporting it under the
    name theirs.patch would overwrite theirs with ours. Export refuses; nothing is written."""
    series_dir = superproject / "patches/Up"
    (series_dir / "theirs.patch").write_bytes(b"theirs")
    (series_dir / "series").write_text("theirs.patch\ntwo.patch\n")
    before = {p.name: p.read_bytes() for p in series_dir.iterdir()}
    capsys.readouterr()
    assert export(superproject) == 1
    err = capsys.readouterr().err
    assert "theirs.patch joined" in err and "run tools/patches apply Up first" in err
    assert {p.name: p.read_bytes() for p in series_dir.iterdir()} == before
    (series_dir / "series").write_text("one.patch\ntwo.patch\n")
    assert export(superproject) == 0  # the series it was applied from exports as before
