"""`report`: the patch status page from the series, the history and measurements (issue 26)."""

from __future__ import annotations

import json
import os
import shutil
import stat
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
from tools.patchtool.cli import main
from tools.patchtool.model.manifest import load_manifest
from tools.patchtool.status_page.live import pr_state, previous
from tools.patchtool.status_page.rows import PatchRow, pull_request, series_rows

pytestmark = pytest.mark.usefixtures("isolated_git")

FIXED = [*numbered(30)[:20], "fixed 21", "added 21b", *numbered(30)[21:]]
PR = "https://github.com/NVIDIA/Megatron-LM/pull/4242"


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Upstream `Up` (main moves on with a shifted file) and a superproject carrying one fix
    (committed 2026-01-01: tests/tools/repos.py fixes the dates)."""
    up = tmp_path / "up"
    init_repo(up, {"lib.py": numbered(30)})
    patch = make_patch(up, "v1", {"lib.py": FIXED}, "fix lib", trailers(status=f"submitted {PR}"))
    commit(up, "main moves", {"lib.py": ["# new", *numbered(30)]})
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Dev")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "dev@example.invalid")
    return make_superproject(tmp_path / "super", up, patches=[("fix.patch", patch)])


def _rows(root: Path) -> list[PatchRow]:
    return series_rows(root, load_manifest(root).upstreams["Up"])


def test_rows_say_what_the_repository_knows(root: Path) -> None:
    (row,) = _rows(root)
    assert (row.subject, row.added, row.removed) == ("fix lib", 2, 1)
    assert (row.status, row.pr_repo, row.pr_number) == (
        f"submitted {PR}",
        "NVIDIA/Megatron-LM",
        4242,
    )
    assert row.first_carried == "2026-01-01"
    assert row.test == "tests/test_x.py::test_fix"


def test_pull_request_is_read_from_any_trailer_value() -> None:
    assert pull_request(["pending", "backport of https://github.com/a/b/pull/7"]) == ("a/b", 7)
    assert pull_request(["pending"]) == ("", 0)


def test_report_then_check(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(root), "report"]) == 0
    page = (root / "docs/patches.md").read_text()
    assert "| Up | `fix.patch` | fix lib | 2026-01-01 | 0 | +2 -1 |" in page
    assert "not measured" in page
    assert main(["--root", str(root), "report", "--check"]) == 0
    (root / "patches/Up/series").write_text("")
    assert main(["--root", str(root), "report", "--check"]) == 1
    err = capsys.readouterr().err
    assert "docs/patches.md, docs/patches.json not current" in err and "tools/patches report" in err


def test_measure_classifies_on_main_and_keeps_it_for_the_same_bytes(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"  # git, and no gh: the PR state is unknown offline
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    monkeypatch.setenv("PATH", str(bin_dir))
    assert main(["--root", str(root), "report", "--measure"]) == 0
    doc = json.loads((root / "docs/patches.json").read_text())
    m = doc["patches"][0]["measurement"]
    assert (m["head"], m["pr_state"], m["tripwire"]) == ("offset", "unknown offline", "not run")
    assert doc["as_of"] == m["measured"]
    # Offline regeneration keeps the measurement: the page stays current.
    assert main(["--root", str(root), "report", "--check"]) == 0
    # A changed patch loses it (a measurement belongs to the bytes it measured).
    path = root / "patches/Up/fix.patch"
    path.write_bytes(path.read_bytes().replace(b"Why: a test fix.", b"Why: a better fix."))
    assert main(["--root", str(root), "report"]) == 0
    again = previous(root / "docs/patches.json")
    assert again[("Up", "fix.patch")].head == "not measured"


def test_pr_state_asks_gh_with_an_argument_list(root: Path, tmp_path: Path) -> None:
    log = tmp_path / "gh.log"
    gh = tmp_path / "gh"
    gh.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\necho MERGED\n')
    gh.chmod(gh.stat().st_mode | stat.S_IEXEC)
    (row,) = _rows(root)
    assert pr_state(row, str(gh)) == "MERGED"
    assert log.read_text().split("\n")[:5] == ["pr", "view", "4242", "--repo", "NVIDIA/Megatron-LM"]
    failing = tmp_path / "gh-fails"
    failing.write_text("#!/bin/sh\nexit 1\n")
    failing.chmod(0o755)
    assert pr_state(row, str(failing)) == "unknown offline"


def test_a_shallow_clone_is_refused(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shallow = tmp_path / "shallow"
    run(["clone", "-q", "--depth", "1", f"file://{root}", str(shallow)], tmp_path)
    assert main(["--root", str(shallow), "report", "--check"]) == 1
    assert "shallow clone" in capsys.readouterr().err
    assert os.path.isdir(shallow)


def test_measure_without_tripwires_keeps_a_verdict_while_the_head_stands(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verdict from an earlier `--tripwires` run survives a plain `--measure` on the same
    upstream head, with its date; a new head drops it to "not run"; an upstream that cannot be
    reached keeps its rows' last measurement instead of "unknown offline"."""
    monkeypatch.setenv("PATH", os.path.dirname(shutil.which("git") or "/usr/bin/git"))
    assert main(["--root", str(root), "report", "--measure"]) == 0
    doc_path = root / "docs/patches.json"
    doc = json.loads(doc_path.read_text())
    doc["patches"][0]["measurement"].update(
        tripwire="fails without the patch", tripwire_measured="2026-01-02"
    )
    doc_path.write_text(json.dumps(doc))
    assert main(["--root", str(root), "report", "--measure"]) == 0
    kept = previous(doc_path)[("Up", "fix.patch")]
    assert (kept.tripwire, kept.tripwire_measured) == ("fails without the patch", "2026-01-02")
    assert "| fails without the patch (2026-01-02) |" in (root / "docs/patches.md").read_text()

    up = tmp_path / "up"
    commit(up, "main moves again", {"other.py": ["x"]})
    assert main(["--root", str(root), "report", "--measure"]) == 0
    moved = previous(doc_path)[("Up", "fix.patch")]
    assert (moved.tripwire, moved.tripwire_measured) == ("not run", "")
    assert moved.head_commit == run(["rev-parse", "main"], up)

    up.rename(tmp_path / "gone")
    assert main(["--root", str(root), "report", "--measure"]) == 0
    assert previous(doc_path)[("Up", "fix.patch")] == moved


def _no_gh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """git on PATH and no gh: PR states are unknown offline, as on these machines."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "git").exists():
        (bin_dir / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    monkeypatch.setenv("PATH", str(bin_dir))


def test_check_wants_the_page_measured_on_the_main_an_offline_mirror_holds(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a mirror an unmeasured page is current; with a mirror holding `main` it is not
    until measured there, and again not once the mirror's `main` moves on."""
    _no_gh(tmp_path, monkeypatch)
    up, mirror = tmp_path / "up", tmp_path / "mirror"
    run(["clone", "-q", "--bare", str(up), str(mirror / "Up.git")], tmp_path)
    check = ["--root", str(root), "report", "--check"]
    assert main(["--root", str(root), "report"]) == 0
    assert main(check) == 0
    assert main([*check, "--mirror-dir", str(mirror)]) == 1
    err = capsys.readouterr().err
    assert "Up: 1 of 1 patches not measured on its main" in err and "--measure" in err
    assert main(["--root", str(root), "report", "--measure", "--mirror-dir", str(mirror)]) == 0
    assert main([*check, "--mirror-dir", str(mirror)]) == 0
    moved = commit(up, "main moves again", {"other.py": ["x = 1"]})
    run(["push", "-q", str(mirror / "Up.git"), "main"], up)
    assert main([*check, "--mirror-dir", str(mirror)]) == 1
    assert f"but its main is at {moved[:12]}" in capsys.readouterr().err


def test_a_port_is_measured_on_the_same_main_and_again_when_it_changes(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """main rewrites the line the fix changes: the pin patch conflicts there, its port (what
    open-pr opens on main) applies; a port that no longer fits says so; a changed port drops
    the earlier measurement."""
    up = tmp_path / "up"
    moved = ["# new", *numbered(30)]
    moved[21] = "upstream 21"
    commit(up, "main rewrites line 21", {"lib.py": moved})
    fixed = [*moved[:21], "fixed 21", "added 21b", *moved[22:]]
    port_file = root / "patches/Up/main/fix.patch"
    port_file.parent.mkdir()
    port_file.write_bytes(make_patch(up, "main", {"lib.py": fixed}, "fix lib", trailers()))
    run(["-C", str(root / "3rdparty/Up"), "fetch", "-q", "origin"], tmp_path)
    _no_gh(tmp_path, monkeypatch)

    def measured() -> dict[str, str]:
        assert main(["--root", str(root), "report", "--measure"]) == 0
        return json.loads((root / "docs/patches.json").read_text())["patches"][0]["measurement"]

    first = measured()
    assert (first["head"], first["port"]) == ("conflict", "port applies")
    assert "conflict; port applies (" in (root / "docs/patches.md").read_text()
    port_file.write_bytes(port_file.read_bytes().replace(b"-upstream 21", b"-line 21"))
    assert previous(root / "docs/patches.json")[("Up", "fix.patch")].port == "port applies"
    assert main(["--root", str(root), "report"]) == 0  # a changed port loses its measurement
    assert previous(root / "docs/patches.json")[("Up", "fix.patch")].head == "not measured"
    assert measured()["port"] == "port does not apply"


def test_the_feeder_branch_column_names_the_commit_that_moved_the_lines(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An upstream whose manifest names a `feeder` gets a column for it: the series replayed
    there, and where a patch conflicts, the branch's commit that rewrote the line it needs.
    `--check` with a mirror holding that branch wants the column measured on its commit."""
    _no_gh(tmp_path, monkeypatch)
    up = tmp_path / "up"
    run(["checkout", "-q", "-b", "dev", "v1"], up)
    rewritten = numbered(30)
    rewritten[20] = "dev rewrote 21"
    moved = commit(up, "dev rewrites line 21", {"lib.py": rewritten})
    run(["checkout", "-q", "main"], up)
    manifest = root / "patches/upstreams.toml"
    manifest.write_text(manifest.read_text() + 'feeder = "dev"\n')
    assert main(["--root", str(root), "report"]) == 0
    assert "| dev: not measured |" in (root / "docs/patches.md").read_text()

    assert main(["--root", str(root), "report", "--measure"]) == 0
    m = previous(root / "docs/patches.json")[("Up", "fix.patch")]
    assert (m.head, m.feeder, m.feeder_commit) == ("offset", "conflict", moved)
    assert (
        m.feeder_cause.startswith(f"moved by {moved[:12]} (")
        and "dev rewrites line 21" in m.feeder_cause
    )
    page = (root / "docs/patches.md").read_text()
    assert f"| dev: conflict ({moved[:12]}, {m.feeder_measured}): moved by {moved[:12]}" in page

    mirror = tmp_path / "mirror"
    run(["clone", "-q", "--bare", str(up), str(mirror / "Up.git")], tmp_path)
    check = ["--root", str(root), "report", "--check", "--mirror-dir", str(mirror)]
    assert main(check) == 0
    run(["checkout", "-q", "dev"], up)
    newer = commit(up, "dev moves on", {"other.py": ["y"]})
    run(["push", "-q", str(mirror / "Up.git"), "dev"], up)
    capsys.readouterr()
    assert main(check) == 1
    assert f"Up: 1 of 1 patches not measured on its dev ({newer[:12]})" in capsys.readouterr().err


def test_a_patch_added_after_the_last_measurement_is_never_a_negative_age() -> None:
    from tools.patchtool.status_page.live import Measurement
    from tools.patchtool.status_page.render import age_days, as_of

    def row(first_carried: str) -> PatchRow:
        return PatchRow("U", "p.patch", "s", 1, 0, "pending", "", 0, first_carried, "t", "x")

    old, new = row("2026-11-20"), row("2026-12-06")
    today = as_of([old, new], [Measurement(measured="2026-11-29")])
    assert today == "2026-12-06"
    assert (age_days(old, today), age_days(new, today)) == ("16", "0")
