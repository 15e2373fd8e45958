"""Sources: release stand-ins (injected local archive), pre-image proof, missing upstreams."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.network import pypi_reachable
from tests.tools.sandbox import REPO_ROOT, UNREACHABLE, Sandbox, lines, run, sdist_downloader
from tools.patchtool.apply.apply import apply_upstream
from tools.patchtool.errors import PatchToolError
from tools.patchtool.model.manifest import Standin, load_manifest
from tools.patchtool.source.detect import STANDIN, detect_source
from tools.patchtool.source.state import upstream_status

STANDIN_SPEC = Standin("sdist", "pkg", "v{version}", "1.0", False, {"pkg/": "src/pkg/"})
TOOL = [sys.executable, str(REPO_ROOT / "tools" / "patches")]


def _standin_sandbox(sandbox: Sandbox, archive_mod: str) -> dict[str, object]:
    """Upstream with src/pkg/mod.py, pinned but unreachable; its sdist ships `archive_mod`."""
    repo, pin = sandbox.upstream("Up", {"src/pkg/mod.py": lines(30), "tests/t.py": "x\n"})
    patch = sandbox.make_patch(
        repo, pin, {"src/pkg/mod.py": lines(30).replace("line 20\n", "line twenty\n")}, "Fix"
    )
    sandbox.add("Up", UNREACHABLE, pin, STANDIN_SPEC, clone=False)
    sandbox.set_series("Up", {"fix.patch": patch})
    return {"downloader": sdist_downloader({"pkg/mod.py": archive_mod, "PKG-INFO": "x\n"})}


def test_standin_materialised_marked_and_patched(sandbox: Sandbox) -> None:
    kwargs = _standin_sandbox(sandbox, lines(30))
    up = load_manifest(sandbox.root).upstreams["Up"]
    outcome = apply_upstream(sandbox.root, up, **kwargs)  # type: ignore[arg-type]
    assert outcome.state == "applied", outcome.message
    checkout = sandbox.root / "3rdparty/Up"
    assert "line twenty" in (checkout / "src/pkg/mod.py").read_text()
    assert not (checkout / "PKG-INFO").exists()  # unmapped archive files are skipped
    root_message = run(checkout, "log", "--format=%B", "-1", "HEAD~1")
    assert root_message.startswith("Release stand-in: pkg==1.0 (sdist), not a clone")
    assert f"NOT a clone of {UNREACHABLE}" in root_message and up.commit in root_message
    source = detect_source(sandbox.root, up)
    assert source.kind == STANDIN and "NOT a clone" in source.detail
    row = upstream_status(sandbox.root, up)
    assert (row["source"], row["patches_applied"], row["patched_state"]) == ("standin", 1, True)
    assert "HEAD is NOT the pin" in str(row["note"])
    # The stand-in commit is the same on every machine (fixed identity and date).
    assert (
        run(checkout, "log", "-1", "--format=%an %ad", "HEAD~1")
        == "mcore-rl-stack patchtool Sat Jan 1 00:00:00 2000 +0000"
    )


def test_standin_with_changed_preimage_is_refused(sandbox: Sandbox) -> None:
    # The archive differs from the pin at line 3, outside the hunk: git am alone would apply.
    kwargs = _standin_sandbox(sandbox, lines(30).replace("line 3\n", "line 3 (release)\n"))
    up = load_manifest(sandbox.root).upstreams["Up"]
    with pytest.raises(
        PatchToolError,
        match=r"fix.patch:\d+: src/pkg/mod.py in the stand-in is blob \w+, the patch expects",
    ):
        apply_upstream(sandbox.root, up, **kwargs)  # type: ignore[arg-type]
    checkout = sandbox.root / "3rdparty/Up"
    assert run(checkout, "rev-list", "--count", "HEAD") == "1"
    assert run(checkout, "branch", "--list", "patched") == ""


def test_missing_upstream_reported_not_verified(sandbox: Sandbox) -> None:
    _, pin = sandbox.upstream("Up", {"a.py": lines(3)})
    sandbox.add("Up", UNREACHABLE, pin, clone=False)
    root = ["--root", str(sandbox.root)]
    proc = subprocess.run([*TOOL, *root, "apply"], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr
    assert "series of 0 patches NOT verified here" in proc.stderr
    assert f"url.<path-to-clone>.insteadOf {UNREACHABLE}" in proc.stderr
    assert "applied" not in proc.stdout
    proc = subprocess.run(
        [*TOOL, *root, "apply", "--allow-missing", "--json"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["upstreams"][0]["state"] == "not-verified"
    proc = subprocess.run([*TOOL, *root, "status", "--json"], capture_output=True, text=True)
    row = json.loads(proc.stdout)["upstreams"][0]
    assert (row["source"], row["commit"], row["patched_state"]) == ("missing", pin, False)


def test_cli_error_is_one_line(sandbox: Sandbox) -> None:
    _, pin = sandbox.upstream("Up", {"a.py": lines(3)})
    sandbox.add("Up", UNREACHABLE, pin, clone=False)
    proc = subprocess.run(
        [*TOOL, "--root", str(sandbox.root), "apply", "Nope"], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: unknown upstream Nope")


@pytest.mark.slow
def test_real_megatron_core_standin_from_pypi(sandbox: Sandbox) -> None:
    if not pypi_reachable():
        pytest.skip("pypi.org:443 unreachable: the real stand-in download cannot run here")
    real = load_manifest(REPO_ROOT).upstreams["Megatron-LM"]
    assert real.standin is not None
    version = real.standin.version
    sandbox.add(
        "Megatron-LM",
        "https://invalid.example/NVIDIA/Megatron-LM.git",
        real.commit,
        real.standin,
        clone=False,
    )
    up = load_manifest(sandbox.root).upstreams["Megatron-LM"]
    outcome = apply_upstream(sandbox.root, up)
    assert outcome.state == "applied", outcome.message
    checkout = sandbox.root / "3rdparty/Megatron-LM"
    assert (checkout / "megatron/core/distributed/distributed_data_parallel.py").is_file()
    assert (checkout / "pyproject.toml").is_file()
    assert f"megatron-core=={version}" in run(
        checkout, "log", "-1", "--format=%B", "refs/patchtool/pin"
    )
    assert (
        len(list((sandbox.root / f".cache/standins/megatron-core-{version}").glob("*.tar.gz"))) == 1
    )


def test_synced_venv_imports_megatron_core_from_the_checkout() -> None:
    spec = (
        importlib.util.find_spec("megatron.core") if importlib.util.find_spec("megatron") else None
    )
    if spec is None or spec.origin is None:
        pytest.skip("megatron-core is not installed in this interpreter (run under `uv run`)")
    expected = (REPO_ROOT / "3rdparty" / "Megatron-LM").resolve()
    assert Path(spec.origin).resolve().is_relative_to(expected), spec.origin


def _drop_blob(repo: Path, rev_path: str) -> None:
    """Delete one loose blob, as a mirror that lacks large blobs does: clones fail at checkout."""
    blob = run(repo, "rev-parse", rev_path)
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()


@pytest.mark.parametrize("layout", ["plain", "name with space", "linked worktree"])
def test_failed_clone_is_rolled_back_and_the_standin_takes_its_place(
    sandbox: Sandbox, layout: str
) -> None:
    repo, pin = sandbox.upstream("Up", {"src/pkg/mod.py": lines(30), "big.gif": "gif\n"})
    patch = sandbox.make_patch(
        repo, pin, {"src/pkg/mod.py": lines(30).replace("line 20\n", "line twenty\n")}, "Fix"
    )
    _drop_blob(repo, f"{pin}:big.gif")
    sandbox.add("Up", str(repo), pin, STANDIN_SPEC, clone=False)
    sandbox.set_series("Up", {"fix.patch": patch})
    root = sandbox.root
    if layout == "name with space":  # the submodule's name is not its path
        run(
            root,
            "config",
            "-f",
            ".gitmodules",
            "--rename-section",
            "submodule.3rdparty/Up",
            "submodule.up stream",
        )
    sandbox.commit()
    if layout == "linked worktree":  # submodules of a worktree live in its own git dir
        root = sandbox.tmp / "wt"
        run(sandbox.root, "worktree", "add", "-q", "--detach", str(root))
    up = load_manifest(root).upstreams["Up"]
    downloader = sdist_downloader({"pkg/mod.py": lines(30)})
    outcome = apply_upstream(root, up, downloader=downloader)
    assert outcome.state == "applied", outcome.message
    assert detect_source(root, up).kind == STANDIN
    # The half-cloned repository is gone wherever git put it: only the stand-in remains.
    git_dir = Path(run(root, "rev-parse", "--absolute-git-dir"))
    assert not (git_dir / "modules").exists() or not any((git_dir / "modules").rglob("HEAD"))
    checkout = root / "3rdparty/Up"
    assert not (checkout / "big.gif").exists()
    assert "line twenty" in (checkout / "src/pkg/mod.py").read_text()


def test_failed_clone_into_foreign_files_keeps_them_and_says_why(sandbox: Sandbox) -> None:
    repo, pin = sandbox.upstream("Up", {"src/pkg/mod.py": lines(3), "big.gif": "gif\n"})
    _drop_blob(repo, f"{pin}:big.gif")
    sandbox.add("Up", str(repo), pin, STANDIN_SPEC, clone=False)
    mine = sandbox.root / "3rdparty/Up/notes.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("my work\n")
    up = load_manifest(sandbox.root).upstreams["Up"]
    with pytest.raises(PatchToolError, match=r"git submodule update failed .*needs an empty"):
        apply_upstream(sandbox.root, up, downloader=sdist_downloader({"pkg/mod.py": lines(3)}))
    assert mine.read_text() == "my work\n"
