"""An offline mirror directory (issue 18): `DIR/<Upstream>.git` bare repositories, shallow
allowed, stand in for the submodule URLs for one run, through git's `url.<DIR>/<name>.git.
insteadOf` on the command's own git calls only; never written to any config file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools.sandbox import REPO_ROOT, UNREACHABLE, Sandbox, run
from tools.patchtool.git import git as g

TOOL = [sys.executable, str(REPO_ROOT / "tools" / "patches")]


def _sandbox(sandbox: Sandbox) -> tuple[Path, str]:
    """Upstream `Up` pinned at a commit whose URL does not answer; one patch in the series."""
    repo, pin = sandbox.upstream("Up", {"mod.py": "VALUE = 1\n"})
    patch = sandbox.make_patch(
        repo, pin, {"mod.py": "VALUE = 2\n"}, "Fix", "Upstream-Status: pending\n"
    )
    sandbox.add("Up", UNREACHABLE, pin, clone=False)
    sandbox.set_series("Up", {"fix.patch": patch})
    sandbox.commit()
    return repo, pin


def _shallow_bare(repo: Path, dest: Path) -> Path:
    """`dest` as a shallow bare clone of `repo`'s HEAD (what ../shared/upstreams holds)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    run(dest.parent, "clone", "-q", "--bare", "--depth", "1", f"file://{repo}", str(dest))
    assert run(dest, "rev-parse", "--is-shallow-repository") == "true"
    return dest


def _tool(
    sandbox: Sandbox, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI with no machine-wide or inherited url rewrites (GIT_CONFIG_* unset)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GIT_CONFIG_")}
    clean["GIT_CONFIG_GLOBAL"] = os.environ["GIT_CONFIG_GLOBAL"]
    clean.update(env or {})
    cmd = [*TOOL, "--root", str(sandbox.root), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=clean, check=False)


def _no_rewrites_written(sandbox: Sandbox) -> None:
    for where in (sandbox.root, sandbox.root / "3rdparty/Up"):
        listed = subprocess.run(
            ["git", "config", "--show-origin", "--get-regexp", r"^url\.|^protocol\."],
            cwd=where,
            capture_output=True,
            text=True,
            env={**os.environ, "GIT_CONFIG_COUNT": "0"},
        )
        assert listed.stdout == "", listed.stdout


def test_mirror_dir_flag_gives_the_exact_pin_and_status_names_it(sandbox: Sandbox) -> None:
    repo, pin = _sandbox(sandbox)
    mirror = sandbox.tmp / "upstreams-mirror"
    _shallow_bare(repo, mirror / "Up.git")
    without = _tool(sandbox, "apply")
    assert without.returncode == 3 and "NOT verified" in without.stdout + without.stderr
    applied = _tool(sandbox, "apply", "--mirror-dir", str(mirror))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    checkout = sandbox.root / "3rdparty/Up"
    assert (checkout / "mod.py").read_text() == "VALUE = 2\n"
    assert run(checkout, "rev-parse", "refs/patchtool/pin") == pin
    _no_rewrites_written(sandbox)
    for args in (["status", "--json", "--mirror-dir", str(mirror)], ["status", "--json"]):
        row = json.loads(_tool(sandbox, *args).stdout)["upstreams"][0]
        assert row["source"] == "mirror", row
        assert str(mirror / "Up.git") in row["source_detail"]
    noop = _tool(sandbox, "apply", "--mirror-dir", str(mirror))
    assert noop.returncode == 0 and "already applied" in noop.stdout


def test_mirror_dir_environment_variable(sandbox: Sandbox) -> None:
    repo, _ = _sandbox(sandbox)
    mirror = sandbox.tmp / "m"
    _shallow_bare(repo, mirror / "Up.git")
    applied = _tool(sandbox, "apply", env={"PATCHTOOL_MIRROR_DIR": str(mirror)})
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert (sandbox.root / "3rdparty/Up/mod.py").read_text() == "VALUE = 2\n"
    _no_rewrites_written(sandbox)


def test_mirror_lacking_the_pin_falls_back_as_without_it(sandbox: Sandbox) -> None:
    """After a pin moves the mirror is stale: the upstream is treated exactly as with no mirror."""
    repo, _ = _sandbox(sandbox)
    (repo / "mod.py").write_text("VALUE = 9\n")
    run(repo, "commit", "-q", "-am", "newer")
    mirror = sandbox.tmp / "m"
    _shallow_bare(repo, mirror / "Up.git")  # holds only the newer commit
    stale = _tool(sandbox, "apply", "--mirror-dir", str(mirror))
    plain = _tool(sandbox, "apply")
    assert stale.returncode == plain.returncode == 3
    assert "lacks the pin" in stale.stderr
    assert stale.stdout == plain.stdout
    assert not (sandbox.root / "3rdparty/Up/mod.py").exists()


def test_missing_mirror_dir_is_an_error_naming_it(sandbox: Sandbox) -> None:
    _sandbox(sandbox)
    proc = _tool(sandbox, "status", "--mirror-dir", str(sandbox.tmp / "nowhere"))
    assert proc.returncode == 1 and "nowhere does not exist" in proc.stderr


def test_session_config_is_appended_after_the_callers_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.file.allow")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "always")
    g.set_session_config([("url./m/Up.git.insteadOf", "https://x/up.git")])
    try:
        env = g.git_env()
    finally:
        g.set_session_config([])
    assert env["GIT_CONFIG_COUNT"] == "2"
    assert env["GIT_CONFIG_KEY_0"] == "protocol.file.allow"
    assert (env["GIT_CONFIG_KEY_1"], env["GIT_CONFIG_VALUE_1"]) == (
        "url./m/Up.git.insteadOf",
        "https://x/up.git",
    )
    assert "GIT_CONFIG_KEY_1" not in g.git_env() or g.git_env()["GIT_CONFIG_COUNT"] == "1"
