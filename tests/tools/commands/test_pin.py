"""`pin --follow`: a three-level chain of nested submodules on generated repos.

Lib has a release stand-in (tags `v{version}`), so moving it also sets or clears its proxy.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.tools.repos import (
    commit,
    init_repo,
    make_patch,
    nest,
    numbered,
    run,
    trailers,
    tree_state,
)
from tests.tools.sandbox import sdist_downloader
from tools.patchtool.cli import main
from tools.patchtool.errors import PatchToolError
from tools.patchtool.model.manifest import Standin, load_manifest
from tools.patchtool.rebase.pin import run_pin
from tools.patchtool.source.pin_check import check_pins

pytestmark = pytest.mark.usefixtures("isolated_git")


LIB_STANDIN = """[Lib.standin]
kind = "sdist"
package = "lib"
tag_format = "v{version}"
version = "1"
proxy = false

[Lib.standin.paths]
"lib.py" = "lib.py"

"""


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
        if name == "Lib":
            text += LIB_STANDIN
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


def test_pin_never_calls_partly_unknown_coherent(
    chain: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18 defect 3: `pin` said "check-pins: coherent" where check-pins exits 3."""
    root = chain["root"]
    assert isinstance(root, Path)
    shutil.rmtree(root / "3rdparty/Top")  # Top's nested pins cannot be read here
    assert main(["--root", str(root), "pin", "Lib", str(chain["L1"])]) == 0
    out = capsys.readouterr().out
    assert main(["--root", str(root), "check-pins"]) == 3
    assert "check-pins: coherent" not in out
    assert "check-pins: coherence partly unknown" in out
    assert "unknown: Top@" in out and "no history of Top here" in out


def standin_of(root: Path, name: str) -> Standin | None:
    return load_manifest(root).upstreams[name].standin


def test_follow_to_a_non_release_sets_the_nearest_release_as_proxy(
    chain: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    root = chain["root"]
    assert isinstance(root, Path)
    assert main(["--root", str(root), "pin", "--follow", "Top", str(chain["T2"])]) == 0
    assert "Lib offline stand-in: lib 1 as PROXY (proxy = true)" in capsys.readouterr().out
    standin = standin_of(root, "Lib")
    assert standin is not None and (standin.version, standin.proxy) == ("1", True)
    l2 = str(chain["L2"])[:12]
    assert standin.basis == (
        f"nearest release to {l2} by content under lib.py: 1: 1 files differ (1 changed, "
        "0 only in the pin, 0 only in the release; tag v1)"
    )
    text = (root / "patches/upstreams.toml").read_text()
    assert 'version = "1"\nproxy = true\nproxy_basis = "nearest release to ' in text
    report = next((root / "docs/rebases").glob("Lib-*.md")).read_text()
    assert "## Offline stand-in" in report and "as PROXY" in report


def test_pin_back_to_a_release_clears_the_proxy(chain: dict[str, object]) -> None:
    root = chain["root"]
    assert isinstance(root, Path)
    run_pin(root, "Lib", str(chain["L2"]), follow=False)
    assert "proxy_basis" in (root / "patches/upstreams.toml").read_text()
    run_pin(root, "Lib", "v1", follow=False)
    standin = standin_of(root, "Lib")
    assert standin is not None and (standin.version, standin.proxy, standin.basis) == (
        "1",
        False,
        "",
    )
    text = (root / "patches/upstreams.toml").read_text()
    assert 'tag = "v1"' in text and "proxy_basis" not in text and "proxy = false" in text


def test_release_given_as_a_commit_is_recognised_by_its_tag(chain: dict[str, object]) -> None:
    root = chain["root"]
    assert isinstance(root, Path)
    run(["tag", "v2", str(chain["L2"])], root / "3rdparty/Lib")
    manifest = root / "patches/upstreams.toml"
    manifest.write_text(manifest.read_text().replace("proxy = false", "proxy = true"))
    run_pin(root, "Lib", str(chain["L2"]), follow=False)
    standin = standin_of(root, "Lib")
    assert standin is not None and (standin.version, standin.proxy) == ("2", False)
    assert 'tag = "v2"' in (root / "patches/upstreams.toml").read_text()


def test_proxy_candidates_are_measured_against_their_archives(chain: dict[str, object]) -> None:
    root = chain["root"]
    assert isinstance(root, Path)
    l2_text = run(["show", f"{chain['L2']}:lib.py"], root / "3rdparty/Lib") + "\n"
    contents = {"1": "\n".join(numbered(30)) + "\n", "2": l2_text}
    asked: list[str] = []

    def download(standin: Standin, cache: Path) -> Path:
        asked.append(standin.version)
        return sdist_downloader({"lib.py": contents[standin.version]}, f"lib-{standin.version}")(
            standin, cache
        )

    run_pin(
        root,
        "Lib",
        str(chain["L2"]),
        follow=False,
        proxies={"Lib": ["1", "2"]},
        downloader=download,
    )
    standin = standin_of(root, "Lib")
    assert asked == ["1", "2"]
    assert standin is not None and (standin.version, standin.proxy) == ("2", True)
    assert standin.basis.endswith(
        "2: 0 files differ (0 changed, 0 only in the pin, 0 only in the release; archive "
        "lib-2.tar.gz); next: 1: 1 files differ (1 changed, 0 only in the pin, 0 only in the "
        "release; archive lib-1.tar.gz)"
    )


def test_no_release_to_measure_is_a_clear_error_and_changes_nothing(
    chain: dict[str, object],
) -> None:
    root = chain["root"]
    assert isinstance(root, Path)
    manifest = root / "patches/upstreams.toml"
    manifest.write_text(
        manifest.read_text() + LIB_STANDIN.replace("Lib", "Mid").replace('"lib.py"', '"mid.py"')
    )
    run(["commit", "-q", "-am", "Mid stand-in"], root)
    before = tree_state(root)
    with pytest.raises(PatchToolError, match=r"Mid: no release tag .* --proxy Mid=X\.Y\.Z"):
        run_pin(root, "Top", str(chain["T2"]), follow=True)
    assert tree_state(root) == before


def test_follow_refuses_gitmodules_entry_without_gitlink(chain: dict[str, object]) -> None:
    root = chain["root"]
    assert isinstance(root, Path)
    mid, top = root.parent / "mid", root.parent / "top"
    run(["checkout", "-q", str(chain["M1"])], mid)
    run(["rm", "-q", "--cached", "3rdparty/Lib"], mid)  # .gitmodules still names it
    run(["commit", "-q", "-m", "M5 gitlink gone"], mid)
    m5 = run(["rev-parse", "HEAD"], mid)
    t5 = nest(top, "3rdparty/Mid-workspace/Mid", mid, m5, "T5")
    for name in ("Mid", "Top"):
        run(["fetch", "-q", "origin"], root / "3rdparty" / name)
    before = tree_state(root)
    with pytest.raises(PatchToolError, match=r"Mid@\w+ nests none of Lib .*nothing was changed"):
        run_pin(root, "Top", t5, follow=True)
    assert tree_state(root) == before


def test_follow_refuses_when_a_chain_upstream_has_no_history_here(
    chain: dict[str, object],
) -> None:
    root = chain["root"]
    assert isinstance(root, Path)
    shutil.rmtree(root / "3rdparty/Lib")
    (root.parent / "lib").rename(root.parent / "lib-gone")
    before = tree_state(root)
    with pytest.raises(PatchToolError, match=r"Lib: cannot find \w+ .*nothing was changed"):
        run_pin(root, "Top", str(chain["T2"]), follow=True)
    assert tree_state(root) == before


def test_already_pinned_upstream_gets_an_inconsistent_standin_fixed(
    chain: dict[str, object],
) -> None:
    root = chain["root"]
    assert isinstance(root, Path)
    manifest = root / "patches/upstreams.toml"
    run_pin(root, "Lib", str(chain["L2"]), follow=False)
    # As `rebase --to <commit>` leaves it: non-release pin, stand-in still claims the release.
    text = manifest.read_text()
    manifest.write_text(text.replace("proxy = true", "proxy = false"))
    run_pin(root, "Top", str(chain["T2"]), follow=True)
    standin = standin_of(root, "Lib")
    assert standin is not None and (standin.version, standin.proxy) == ("1", True)
    # A proxy chosen earlier (e.g. from archives) is kept when nothing names candidates.
    manifest.write_text(manifest.read_text().replace('version = "1"', 'version = "7"'))
    before = manifest.read_text()
    run_pin(root, "Top", str(chain["T2"]), follow=True)
    assert manifest.read_text() == before
