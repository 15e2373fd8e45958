"""upstream-check: the upstream's own pinned formatters/linters and DCO rule, per patch.

The tests with a real formatter run it once per file state through `uv tool run` (PyPI or uv's
cache); they skip, saying why, where the tool cannot be fetched.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tools.sandbox import TRAILERS, UNREACHABLE, Sandbox, run, sdist_downloader
from tests.tools.upstream_check.hooks import (
    BLACK_HOOKS,
    BLACK_SPEC,
    CONTRIBUTING,
    RUFF_HOOKS,
    RUFF_SPEC,
    SIGNOFF,
)
from tools.patchtool.apply.apply import apply_upstream
from tools.patchtool.cli import main
from tools.patchtool.errors import PatchToolError
from tools.patchtool.model.manifest import Standin, load_manifest
from tools.patchtool.source.detect import STANDIN, Source
from tools.patchtool.upstream_check.checks import check_upstream
from tools.patchtool.upstream_check.config import load_checks
from tools.patchtool.upstream_check.model import BLACK, ISORT
from tools.patchtool.upstream_check.runner import (
    ToolRunner,
    find_uv,
)

PYPROJECT_BLACK = (
    '[tool.black]\nline_length = 100\nskip_string_normalization = true\nrequired_version = "24"\n'
    '[tool.isort]\nprofile = "black"\n'
)
UNFORMATTED = "x = {  'a':1 }\n"


def _tool_or_skip(spec: str, tmp: Path) -> str:
    """uv's path if `spec` runs through `uv tool run` here; else skip with the reason."""
    try:
        uv = find_uv()
    except PatchToolError as exc:
        pytest.skip(str(exc))
    why = ToolRunner(uv, tmp).unavailable(spec)
    if why:
        pytest.skip(f"cannot fetch {spec} with `uv tool run` (needs PyPI or uv's cache): {why}")
    return uv


def _applied(
    sandbox: Sandbox, files: dict[str, str], patches: list[tuple[dict[str, str], str]]
) -> Path:
    """Upstream `Up` with `files`, a series of (changed files, trailers) patches, applied."""
    repo, pin = sandbox.upstream("Up", files)
    mboxes, base = {}, pin
    for number, (change, trailers) in enumerate(patches, 1):
        mboxes[f"p{number}.patch"] = sandbox.make_patch(
            repo, base, change, f"Fix {number}", trailers
        )
        base = "HEAD"
    sandbox.add("Up", str(repo), pin)
    sandbox.set_series("Up", mboxes)
    sandbox.commit()
    up = load_manifest(sandbox.root).upstreams["Up"]
    assert apply_upstream(sandbox.root, up).state == "applied"
    return sandbox.root


# --- no formatter needed ------------------------------------------------------------------


def test_megatron_standin_uses_recorded_hooks_only_if_its_pyproject_agrees(
    sandbox: Sandbox,
) -> None:
    spec = Standin("sdist", "megatron-core", "core_v{version}", "1.0", False, {"": ""})
    _repo, pin = sandbox.upstream("Megatron-LM", {"megatron/core/a.py": "x = 1\n"})
    sandbox.add("Megatron-LM", UNREACHABLE, pin, spec, clone=False)
    up = load_manifest(sandbox.root).upstreams["Megatron-LM"]
    checkout = sandbox.root / up.path
    for required, expect in (("24", ""), ("26", "requires black 26")):
        (checkout / "megatron/core").mkdir(parents=True, exist_ok=True)
        (checkout / "pyproject.toml").write_text(PYPROJECT_BLACK.replace('"24"', f'"{required}"'))
        source = Source(STANDIN, pin, "release stand-in megatron-core==1.0")
        checks, not_run, why = load_checks(checkout, up, source)
        if expect:
            assert checks == [] and expect in why and "not checked" in why
        else:
            assert [(c.kind, c.spec) for c in checks] == [
                (BLACK, BLACK_SPEC),
                (ISORT, "isort==5.13.2"),
            ]
            assert why == "" and not_run and not_run[0].startswith("pylint (recorded copy")


def test_bridge_like_standin_without_config_is_not_checked(sandbox: Sandbox) -> None:
    spec = Standin("wheel", "pkg", "v{version}", "1.0", False, {"pkg/": "src/pkg/"})
    repo, pin = sandbox.upstream("Up", {"src/pkg/mod.py": "x = 1\n"})
    patch = sandbox.make_patch(repo, pin, {"src/pkg/mod.py": "x = 2\n"}, "Fix", TRAILERS)
    sandbox.add("Up", UNREACHABLE, pin, spec, clone=False)
    sandbox.set_series("Up", {"fix.patch": patch})
    up = load_manifest(sandbox.root).upstreams["Up"]
    downloader = sdist_downloader({"pkg/mod.py": "x = 1\n"})
    assert apply_upstream(sandbox.root, up, downloader=downloader).state == "applied"
    report = check_upstream(sandbox.root, up, uv="unused")
    assert report.state == "not-checked" and report.finding_count == 0
    assert report.patches[0].ran == []  # rendered "nothing checked", never "clean"
    assert any("config not available on the stand-in" in u for u in report.unchecked)
    assert any("DCO not checked" in u for u in report.unchecked)
    root = ["--root", str(sandbox.root), "upstream-check", "Up"]
    assert main(root) == 3
    assert main([*root, "--allow-missing"]) == 0


def test_missing_upstream_is_not_checked_here(
    sandbox: Sandbox, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, pin = sandbox.upstream("Up", {"a.py": "x = 1\n"})
    patch = sandbox.make_patch(repo, pin, {"a.py": "x = 2\n"}, "Fix", TRAILERS)
    sandbox.add("Up", UNREACHABLE, pin, clone=False)
    sandbox.set_series("Up", {"fix.patch": patch})
    root = ["--root", str(sandbox.root), "upstream-check"]
    assert main(root) == 3
    assert "Up: not-checked" in capsys.readouterr().out
    assert main([*root, "--allow-missing"]) == 0


def test_commit_differing_from_its_patch_is_refused(sandbox: Sandbox) -> None:
    root = _applied(sandbox, {"a.py": "x = 1\n"}, [({"a.py": "x = 2\n"}, TRAILERS)])
    checkout = root / "3rdparty/Up"
    (checkout / "a.py").write_text("x = 3\n")
    run(checkout, "commit", "-q", "--amend", "-a", "--no-edit")
    up = load_manifest(root).upstreams["Up"]
    with pytest.raises(PatchToolError, match=r"differs from p1.patch \(patch-id\)"):
        check_upstream(root, up, uv="unused")


# --- with the real pinned formatters --------------------------------------------------------


def test_ruff_finding_dco_finding_and_clean_patch(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tool_or_skip(RUFF_SPEC, tmp_path)
    base = {
        ".pre-commit-config.yaml": RUFF_HOOKS,
        "pyproject.toml": '[tool.ruff.lint]\nselect = ["F"]\n',
        "CONTRIBUTING.md": CONTRIBUTING,
        "pkg/old.py": "import os\n\nX = 1\n",  # F401 already upstream: pre-existing
    }
    patches = [
        ({"pkg/clean.py": "X = 1\n"}, TRAILERS + SIGNOFF),
        ({"pkg/bad.py": "import sys\n\nY = 2\n"}, TRAILERS),
        ({"pkg/old.py": "import os\n\nX = 2\n"}, TRAILERS + SIGNOFF),
    ]
    root = _applied(sandbox, base, patches)
    capsys.readouterr()
    assert main(["--root", str(root), "upstream-check", "--json"]) == 1  # one run, via the CLI
    (report,) = json.loads(capsys.readouterr().out)["upstreams"]
    clean, bad, old = report["patches"]
    assert report["state"] == "checked" and report["dco"].startswith("CONTRIBUTING.md asks")
    assert clean["findings"] == [] and clean["ran"] == ["dco", "ruff (ruff 0.9.9)"]
    assert sorted((f["check"].split()[0], f["file"], f["line"]) for f in bad["findings"]) == [
        ("dco", "patches/Up/p2.patch", 4),
        ("ruff", "pkg/bad.py", 1),
    ]
    assert any("F401" in f["message"] and "sys" in f["message"] for f in bad["findings"])
    assert [(f["file"], f["preexisting"]) for f in old["findings"]] == [("pkg/old.py", True)]
    assert report["findings"] == 2


def test_black_finding_under_megatron_core_only(sandbox: Sandbox, tmp_path: Path) -> None:
    uv = _tool_or_skip(BLACK_SPEC, tmp_path)
    base = {".pre-commit-config.yaml": BLACK_HOOKS, "pyproject.toml": PYPROJECT_BLACK}
    change = {
        "megatron/core/ok.py": "x = {'a': 1}\n",
        "megatron/core/bad.py": UNFORMATTED,
        "megatron/training/elsewhere.py": UNFORMATTED,  # outside the hook's files: not checked
    }
    root = _applied(sandbox, base, [(change, TRAILERS)])
    report = check_upstream(root, load_manifest(root).upstreams["Up"], uv=uv)
    (patch,) = report.patches
    assert [(f.file, f.line, f.check) for f in patch.findings] == [
        ("megatron/core/bad.py", 1, "black (black 24.4.2)")
    ]
    assert "+x = {'a': 1}" in patch.findings[0].detail  # the diff to apply, strings kept
    assert report.dco == "no CONTRIBUTING.md: the upstream states no DCO rule"


def test_an_adopted_prs_findings_are_reported_not_failing(
    sandbox: Sandbox, capsys: pytest.CaptureFixture[str]
) -> None:
    """A patch `adopt` carries is someone else's open PR: its missing sign-off is theirs to fix
    there (we cannot sign off for them), so it is reported and does not fail; ours still does."""
    theirs = "Origin: upstream PR #9 by Grace Hopper, adopted (author kept)"
    adopted = TRAILERS.replace("Origin: mcore-rl-stack tests", theirs)
    base = {"CONTRIBUTING.md": CONTRIBUTING, "pkg/a.py": "A = 1\n"}
    root = _applied(sandbox, base, [({"pkg/a.py": "A = 2\n"}, adopted)])
    check = ["--root", str(root), "upstream-check", "--allow-missing"]
    capsys.readouterr()
    assert main(check) == 0
    out = capsys.readouterr().out
    assert "p1.patch: 1 finding(s): upstream PR #9 by Grace Hopper's, to fix there" in out
    assert "dco: no Signed-off-by line" in out
    patch = root / "patches/Up/p1.patch"
    patch.write_text(patch.read_text().replace(theirs, "Origin: ours"))
    run(root, "commit", "-qam", "ours now")
    assert main(["--root", str(root), "apply", "Up"]) == 0
    assert main(check) == 1
