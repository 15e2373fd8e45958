"""`adopt`: an upstream PR carried as the series' last patch (author kept, PR linked, its own
test as Upstream-Test), applied, then retired by a rebase onto a target where it merged."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.repos import (
    commit,
    init_repo,
    make_superproject,
    numbered,
    run,
    trailers,
)
from tools.patchtool.cli import main
from tools.patchtool.git.git import format_patch
from tools.patchtool.model.series import parse_patch

pytestmark = pytest.mark.usefixtures("isolated_git")
MOD = "pkg/mod.py"
TEST = "tests/patches/test_nine.py::test_nine"
URL = "https://github.com/example/Up"


@pytest.fixture
def scenario(tmp_path: Path) -> tuple[Path, Path, str]:
    """(superproject, upstream, PR 9's head): PR 9 by Grace, from v1, fixes line 30 of MOD and
    adds tests/test_mod.py::test_line_30; the series is empty."""
    up = tmp_path / "up"
    init_repo(up, {MOD: numbered(40)})
    run(["checkout", "-q", "-b", "pr9"], up)
    lines = numbered(40)
    lines[29] = "fixed 30"
    grace = {"GIT_AUTHOR_NAME": "Grace Hopper", "GIT_AUTHOR_EMAIL": "grace@example.org"}
    files = {
        MOD: lines,
        "tests/test_mod.py": [
            "def test_line_30():",
            "    assert True",
            "",
            "",
            "class TestMod:",
            "    def test_in_a_class(self):",
            "        assert True",
        ],
    }
    for rel, text in files.items():
        (up / rel).parent.mkdir(parents=True, exist_ok=True)
        (up / rel).write_text("\n".join(text) + "\n")
    run(["add", "."], up)
    run(["commit", "-q", "-m", "fix(mod): line 30\n\nLine 30 was wrong."], up, env=grace)
    head = run(["rev-parse", "HEAD"], up)
    run(["update-ref", "refs/pull/9/head", head], up)
    run(["update-ref", "refs/pull/9/merge", head], up)
    run(["checkout", "-q", "main"], up)
    root = make_superproject(tmp_path / "super", up)
    manifest = root / "patches/upstreams.toml"  # a GitHub URL: the PR link lint accepts
    manifest.write_text(manifest.read_text().replace(f'url = "{up}"', f'url = "{URL}.git"'))
    (root / "tests/patches").mkdir(parents=True)
    (root / "tests/patches/test_nine.py").write_text("def test_nine():\n    pass\n")
    run(["fetch", "-q", "origin", "+refs/pull/*:refs/pull/*"], root / "3rdparty/Up")
    return root, up, head


def test_adopt_writes_the_pr_as_a_patch(scenario, capsys) -> None:
    root, _, head = scenario
    assert main(["--root", str(root), "adopt", "Up", "9", "--test", TEST]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert f"adopted #9 ({URL}/pull/9, head {head[:12]}" in out
    assert (root / "patches/Up/series").read_text() == "pr9-fix-mod-line-30.patch\n"
    patch = parse_patch(root / "patches/Up/pr9-fix-mod-line-30.patch")
    assert (patch.author_name, patch.author_email) == ("Grace Hopper", "grace@example.org")
    assert patch.subject == "fix(mod): line 30"
    assert patch.trailer_values("Upstream-Status") == [f"submitted {URL}/pull/9"]
    assert patch.trailer_values("Test") == [TEST]
    assert patch.trailer_values("Upstream-Test") == [
        "tests/test_mod.py::test_line_30",
        "tests/test_mod.py::TestMod::test_in_a_class",
    ]
    assert {f.path for f in patch.files} == {MOD, "tests/test_mod.py"}
    assert main(["--root", str(root), "apply", "Up"]) == 0  # it applies on the pin
    assert main(["--root", str(root), "adopt", "Up", "9", "--test", TEST]) == 1
    assert "pr9-fix-mod-line-30.patch exists" in capsys.readouterr().err


def test_rebase_retires_it_once_merged_upstream(scenario, tmp_path: Path, capsys) -> None:
    root, up, _ = scenario
    assert main(["--root", str(root), "adopt", "Up", "9", "--test", TEST]) == 0
    run(["add", "patches", "tests"], root)
    run(["commit", "-q", "-m", "adopt #9"], root)
    lines = numbered(40)
    lines[29] = "fixed 30"
    commit(
        up,
        "fix(mod): line 30 (#9)",
        {MOD: lines, "tests/test_mod.py": ["def test_line_30():", "    assert 1"]},
    )
    run(["tag", "v2"], up)
    with (tmp_path / "isolated.gitconfig").open("a") as config:  # the GitHub URL, offline
        config.write(f'[url "{up}"]\n\tinsteadOf = {URL}.git\n')
    capsys.readouterr()
    assert main(["--root", str(root), "rebase", "Up", "--to", "v2"]) == 0
    out = capsys.readouterr().out
    assert "pr9-fix-mod-line-30.patch  upstreamed" in out
    assert "pr-merged: merged upstream as #9" in out
    retired = (root / "patches/Up/upstreamed/pr9-fix-mod-line-30.patch").read_text()
    assert "Upstream-Evidence: " in retired and "merged upstream as #9" in retired
    assert (root / "patches/Up/series").read_text() == ""


def test_unknown_pr_names_the_fetch(scenario, capsys) -> None:
    root, _, _ = scenario
    assert main(["--root", str(root), "adopt", "Up", "12", "--test", TEST]) == 1
    assert "has no refs/pull/12/head; fetch it there" in capsys.readouterr().err


def _series_with_ours(root: Path, up: Path, later_line: int) -> None:
    """The series, committed: first.patch (line 5), ours.patch (line 30: the fix PR 9 also
    makes), later.patch (line `later_line`); each with the tripwire TEST."""
    run(["checkout", "-q", "-b", "ours", "v1"], up)
    lines, series = numbered(40), []
    for name, at in (("first", 5), ("ours", 30), ("later", later_line)):
        lines[at - 1] = f"{name} {at}"
        needs = ["Depends-On: Up/ours.patch"] if name == "later" else []
        message = f"Fix {name}\n\nWhy: a test fix.\n\n" + "\n".join(trailers(TEST) + needs) + "\n"
        commit(up, message, {MOD: list(lines)})
        (root / f"patches/Up/{name}.patch").write_bytes(format_patch(up, "HEAD^!"))
        series.append(f"{name}.patch")
    run(["checkout", "-q", "main"], up)
    (root / "patches/Up/series").write_text("".join(f"{n}\n" for n in series))
    run(["add", "patches"], root)
    run(["commit", "-q", "-m", "series"], root)


def test_adopt_replaces_our_same_fix_in_its_place(scenario, capsys) -> None:
    """PR 9 takes ours.patch's place (later.patch still applies after it), ours is retired
    naming the PR, and the PR inherits ours' tripwire."""
    root, up, _ = scenario
    _series_with_ours(root, up, later_line=38)
    args = ["--root", str(root), "adopt", "Up", "9", "--replaces", "patches/Up/ours.patch"]
    assert main(args) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "(in the place of ours.patch)" in out and "tools/patches export Up" in out
    name = "pr9-fix-mod-line-30.patch"
    assert (root / "patches/Up/series").read_text() == f"first.patch\n{name}\nlater.patch\n"
    assert parse_patch(root / "patches/Up" / name).trailer_values("Test") == [TEST]
    retired = parse_patch(root / "patches/Up/upstreamed/ours.patch")
    assert retired.trailer_values("Upstream-Status") == [
        f"not-needed superseded by upstream PR #9 ({URL}/pull/9), carried as {name}"
    ]
    assert not (root / "patches/Up/ours.patch").exists()
    later = parse_patch(root / "patches/Up/later.patch")
    assert later.trailer_values("Depends-On") == [f"Up/{name}"]
    assert main(["--root", str(root), "apply", "Up"]) == 0
    checkout = (root / "3rdparty/Up" / MOD).read_text().splitlines()
    assert (checkout[4], checkout[29], checkout[37]) == ("first 5", "fixed 30", "later 38")


def test_adopt_refuses_when_a_later_patch_no_longer_applies(scenario, capsys) -> None:
    """later.patch edits line 31, its context ours' line 30: with the PR in ours' place it
    would not apply, so nothing is written."""
    root, up, _ = scenario
    _series_with_ours(root, up, later_line=31)
    before = {p.name: p.read_bytes() for p in (root / "patches/Up").iterdir() if p.is_file()}
    args = ["--root", str(root), "adopt", "Up", "9", "--replaces", "ours.patch"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "later.patch does not apply after PR #9 in place of ours.patch" in err
    after = {p.name: p.read_bytes() for p in (root / "patches/Up").iterdir() if p.is_file()}
    assert after == before and not (root / "patches/Up/upstreamed").exists()


def test_adopt_needs_a_tripwire(scenario, capsys) -> None:
    root, _, _ = scenario
    assert main(["--root", str(root), "adopt", "Up", "9"]) == 1
    assert "--test NODE is required" in capsys.readouterr().err
