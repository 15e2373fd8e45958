"""`pin --follow`: a three-level chain of nested submodules on generated repos."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.repos import (
    commit,
    init_repo,
    isolate_git,
    make_patch,
    numbered,
    run,
    trailers,
    tree_state,
)
from tools.patchtool.check_pins import check_pins
from tools.patchtool.cli import main
from tools.patchtool.errors import PatchToolError
from tools.patchtool.pin import run_pin


@pytest.fixture(autouse=True)
def _isolated_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate_git(monkeypatch, tmp_path)


def nest(repo: Path, path: str, url: Path, sha: str, message: str) -> str:
    """Commit `.gitmodules` + a gitlink at `path` -> `sha` (sha need not exist)."""
    (repo / ".gitmodules").write_text(f'[submodule "x"]\n\tpath = {path}\n\turl = {url}\n')
    run(["add", ".gitmodules"], repo)
    run(["update-index", "--add", "--cacheinfo", f"160000,{sha},{path}"], repo)
    run(["commit", "-q", "-m", message], repo)
    return run(["rev-parse", "HEAD"], repo)


@pytest.fixture
def chain(tmp_path: Path) -> dict[str, object]:
    lib, mid, top = tmp_path / "lib", tmp_path / "mid", tmp_path / "top"
    shas: dict[str, str] = {"L1": init_repo(lib, {"lib.py": numbered(30)}, tag="v1")}
    patch = make_patch(
        lib,
        "v1",
        {"lib.py": [*numbered(30)[:20], "fixed 21", *numbered(30)[21:]]},
        "fix lib",
        trailers(),
    )
    shas["L2"] = commit(lib, "L2", {"lib.py": ["# new", *numbered(30)]})
    init_repo(mid, {"mid.py": ["m"]}, tag="")
    shas["M1"] = nest(mid, "3rdparty/Lib", lib, shas["L1"], "M1")
    shas["M2"] = nest(mid, "3rdparty/Lib", lib, shas["L2"], "M2")
    run(["update-index", "--force-remove", "3rdparty/Lib"], mid)
    (mid / ".gitmodules").write_text("")
    run(["add", ".gitmodules"], mid)
    run(["commit", "-q", "-m", "M3 drops lib"], mid)
    shas["M3"] = run(["rev-parse", "HEAD"], mid)
    init_repo(top, {"top.py": ["t"]}, tag="")
    shas["T1"] = nest(top, "3rdparty/Mid-workspace/Mid", mid, shas["M1"], "T1")
    shas["T2"] = nest(top, "3rdparty/Mid-workspace/Mid", mid, shas["M2"], "T2")
    shas["T3"] = nest(top, "3rdparty/Mid-workspace/Mid", mid, shas["M3"], "T3")
    shas["T4"] = nest(top, "3rdparty/Mid-workspace/Mid", mid, "2" * 40, "T4 nests a missing commit")
    root = tmp_path / "super"
    root.mkdir()
    run(["init", "-q"], root)
    (root / "patches/Lib").mkdir(parents=True)
    (root / "patches/Lib/fix.patch").write_bytes(patch)
    (root / "patches/Lib/series").write_text("fix.patch\n")
    for name in ("Mid", "Top"):
        (root / f"patches/{name}").mkdir()
        (root / f"patches/{name}/series").write_text("")
    pins = {
        "Lib": (lib, shas["L1"], "v1"),
        "Mid": (mid, shas["M1"], ""),
        "Top": (top, shas["T1"], ""),
    }
    text = ""
    for name, (url, sha, tag) in pins.items():
        text += f'[{name}]\npath = "3rdparty/{name}"\nurl = "{url}"\ntag = "{tag}"\ncommit = "{sha}"\n\n'
        run(["clone", "-q", str(url), str(root / "3rdparty" / name)], root)
        run(["checkout", "-q", "--detach", sha], root / "3rdparty" / name)
    (root / "patches/upstreams.toml").write_text(text)
    (root / ".gitmodules").write_text(
        "".join(
            f'[submodule "3rdparty/{n}"]\n\tpath = 3rdparty/{n}\n\turl = {u}\n'
            for n, (u, _s, _t) in pins.items()
        )
    )
    run(["add", "patches", ".gitmodules"], root)
    for name, (_url, sha, _tag) in pins.items():
        run(["update-index", "--add", "--cacheinfo", f"160000,{sha},3rdparty/{name}"], root)
    run(["commit", "-q", "-m", "super"], root)
    return {"root": root, **shas}


def gitlink(root: Path, name: str) -> str:
    return run(["ls-files", "-s", f"3rdparty/{name}"], root).split()[1]


def test_follow_resolves_the_chain_and_rebases(
    chain: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    root = chain["root"]
    assert isinstance(root, Path)
    assert main(["--root", str(root), "pin", "--follow", "Top", str(chain["T2"])]) == 0
    out = capsys.readouterr().out
    assert {gitlink(root, n) for n in ("Top", "Mid", "Lib")} == {
        chain["T2"],
        chain["M2"],
        chain["L2"],
    }
    assert gitlink(root, "Lib") == chain["L2"]
    manifest = (root / "patches/upstreams.toml").read_text()
    assert f'commit = "{chain["L2"]}"' in manifest and f'commit = "{chain["T2"]}"' in manifest
    assert "fix.patch  offset" in out and "check-pins: coherent" in out
    assert b"@@ -19,7 +19,7 @@ line 17" in (root / "patches/Lib/fix.patch").read_bytes()
    assert [r.state for r in check_pins(root)] == ["same", "same"]


def test_follow_refuses_a_link_without_nested_gitlink(chain: dict[str, object]) -> None:
    root = chain["root"]
    assert isinstance(root, Path)
    before = tree_state(root)
    with pytest.raises(PatchToolError, match=r"Mid@\w+ nests none of Lib"):
        run_pin(root, "Top", str(chain["T3"]), follow=True)
    assert tree_state(root) == before


def test_follow_refuses_when_history_is_absent(chain: dict[str, object]) -> None:
    root = chain["root"]
    assert isinstance(root, Path)
    before = tree_state(root)
    with pytest.raises(PatchToolError, match="Mid: cannot find 2222222222"):
        run_pin(root, "Top", str(chain["T4"]), follow=True)
    assert tree_state(root) == before


def test_pin_one_upstream_reports_incoherence(
    chain: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    root = chain["root"]
    assert isinstance(root, Path)
    assert main(["--root", str(root), "pin", "Lib", str(chain["L2"])]) == 0
    out = capsys.readouterr().out
    assert gitlink(root, "Lib") == chain["L2"] and gitlink(root, "Mid") == chain["M1"]
    assert "incoherent: Mid@" in out and "ours-ahead" in out
