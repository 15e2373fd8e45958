"""`check-pins` on generated upstreams: a holder nesting a library, plus version bounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tools.repos import commit, init_repo, numbered, run
from tools.patchtool.cli import main
from tools.patchtool.source.pin_check import (
    AHEAD,
    BEHIND,
    DIVERGED,
    OK,
    SAME,
    UNCONSTRAINED,
    UNKNOWN,
    VIOLATED,
    check_pins,
    satisfies,
)

pytestmark = pytest.mark.usefixtures("isolated_git")


@pytest.fixture
def lib(tmp_path: Path) -> dict[str, str]:
    """Lib history: v1.0 -> c2 -> c3 (tag v2.0), and a side branch from v1.0."""
    repo = tmp_path / "lib"
    shas = {"v1.0": init_repo(repo, {"lib.py": numbered(3)}, tag="v1.0")}
    shas["c2"] = commit(repo, "c2", {"lib.py": numbered(4)})
    shas["c3"] = shas["v2.0"] = commit(repo, "c3", {"lib.py": numbered(5)})
    run(["tag", "v2.0"], repo)
    run(["checkout", "-q", "-b", "side", "v1.0"], repo)
    shas["side"] = commit(repo, "side", {"lib.py": numbered(6)})
    run(["checkout", "-q", "main"], repo)
    return shas


def holder_repo(tmp_path: Path, nested: str, requirement: str) -> str:
    """Holder: nests Lib at `nested` (URL spelled differently) and depends on `lib<spec>`."""
    repo = tmp_path / "holder"
    lib_url = str(tmp_path / "lib")
    init_repo(repo, {"README": ["holder"]}, tag="")
    (repo / ".gitmodules").write_text(
        f'[submodule "lib"]\n\tpath = third/lib\n\turl = {lib_url}.git/\n'
    )
    (repo / "pyproject.toml").write_text(
        f'[project]\nname = "holder"\ndependencies = ["numpy", "{requirement}"]\n'
    )
    run(["add", ".gitmodules", "pyproject.toml"], repo)
    run(["update-index", "--add", "--cacheinfo", f"160000,{nested},third/lib"], repo)
    run(["commit", "-q", "-m", "nest lib"], repo)
    run(["tag", "h1"], repo)
    return run(["rev-parse", "HEAD"], repo)


def superproject(
    tmp_path: Path, lib_pin: str, lib_tag: str, holder_pin: str, clone_holder: bool = True
) -> Path:
    root = tmp_path / "super"
    root.mkdir()
    run(["init", "-q"], root)
    (root / "patches").mkdir()
    (root / "patches/upstreams.toml").write_text(
        f'[Lib]\npath = "3rdparty/Lib"\nurl = "{tmp_path / "lib"}"\ntag = "{lib_tag}"\n'
        f'commit = "{lib_pin}"\ndistribution = "lib"\n\n'
        '[Lib.standin]\nkind = "wheel"\npackage = "lib"\ntag_format = "v{version}"\n'
        'version = "1.0"\nproxy = false\n\n[Lib.standin.paths]\n"lib.py" = "lib.py"\n\n'
        f'[Holder]\npath = "3rdparty/Holder"\nurl = "{tmp_path / "holder"}"\ntag = "h1"\n'
        f'commit = "{holder_pin}"\ndistribution = "holder"\n'
    )
    run(["clone", "-q", str(tmp_path / "lib"), str(root / "3rdparty/Lib")], root)
    if clone_holder:
        run(["clone", "-q", str(tmp_path / "holder"), str(root / "3rdparty/Holder")], root)
    return root


def states(root: Path) -> dict[str, str]:
    return {r.kind: r.state for r in check_pins(root)}


@pytest.mark.parametrize(
    ("ours", "nested", "expected"),
    [("c2", "c2", SAME), ("c3", "c2", AHEAD), ("v1.0", "c2", BEHIND), ("side", "c2", DIVERGED)],
)
def test_nested_gitlink_relation(
    tmp_path: Path, lib: dict[str, str], ours: str, nested: str, expected: str
) -> None:
    holder = holder_repo(tmp_path, lib[nested], "lib>=1.0")
    root = superproject(tmp_path, lib[ours], "", holder)
    relation = next(r for r in check_pins(root) if r.kind == "nested-gitlink")
    assert (relation.holder, relation.target, relation.theirs) == ("Holder", "Lib", lib[nested])
    assert relation.state == expected


def test_unknown_when_nested_commit_is_not_in_history(tmp_path: Path, lib: dict[str, str]) -> None:
    holder = holder_repo(tmp_path, "1" * 40, "lib")
    root = superproject(tmp_path, lib["c3"], "", holder)
    relation = next(r for r in check_pins(root) if r.kind == "nested-gitlink")
    assert relation.state == UNKNOWN and "not in" in relation.detail
    assert exit_code_of(root) == 3


def test_unknown_when_holder_has_no_history(tmp_path: Path, lib: dict[str, str]) -> None:
    holder = holder_repo(tmp_path, lib["c2"], "lib")
    root = superproject(tmp_path, lib["c3"], "", holder, clone_holder=False)
    relations = check_pins(root)
    assert [(r.holder, r.state) for r in relations] == [("Holder", UNKNOWN)]
    assert "no history of Holder" in relations[0].detail


def exit_code_of(root: Path) -> int:
    return main(["--root", str(root), "check-pins"])


@pytest.mark.parametrize(
    ("tag", "spec", "expected"),
    [
        ("v1.0", ">=0.9,<2.0", OK),
        ("v2.0", ">=0.9,<2.0", VIOLATED),
        ("v2.0", "", UNCONSTRAINED),
        ("", ">=1", UNKNOWN),
    ],
)
def test_requirement_against_our_release(
    tmp_path: Path, lib: dict[str, str], tag: str, spec: str, expected: str
) -> None:
    pin = lib[tag] if tag else lib["c2"]
    holder = holder_repo(tmp_path, pin, f"lib[extra]{spec}")
    root = superproject(tmp_path, pin, tag, holder)
    assert states(root) == {"nested-gitlink": SAME, "requirement": expected}


def test_cli_exit_codes_and_json(
    tmp_path: Path, lib: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    holder = holder_repo(tmp_path, lib["c2"], "lib>=1.0")
    root = superproject(tmp_path, lib["c3"], "v2.0", holder)
    assert exit_code_of(root) == 1
    assert "pins INCOHERENT" in capsys.readouterr().out
    assert main(["--root", str(root), "check-pins", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["coherent"] is False
    assert [r["state"] for r in data["relations"]] == [AHEAD, OK]


def test_version_specifiers() -> None:
    assert satisfies("0.16.1", ">=0.15.0a0,<0.17.0") is True
    assert satisfies("0.19.0", ">=0.15.0a0,<0.17.0") is False
    assert satisfies("0.17.0rc0", "<0.17.0") is False  # PEP 440: no pre-release of V
    assert satisfies("0.17.0rc0", "<0.17.0rc1") is True
    assert satisfies("0.16.1.post1", ">0.16.1") is False
    assert satisfies("0.17.0", "~=0.16.0") is False and satisfies("0.16.9", "~=0.16.0") is True
    assert satisfies("0.16.1", "==0.16.*") is True and satisfies("0.16.1", "!=0.16.1") is False
    assert satisfies("1.0.dev1", "<1.0a0") is True
    assert satisfies("0.16", "==0.16.0") is True
    assert satisfies("x", ">=1") is None
