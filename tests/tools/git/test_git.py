"""git/git.py: the one git runner (pinned config on every call, rev(), patch_id())."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.tools.repos import commit, init_repo, numbered, run
from tools.patchtool.errors import GitError
from tools.patchtool.git import git as g


@pytest.fixture
def repo(tmp_path: Path, isolated_git: None) -> Path:
    path = tmp_path / "repo"
    init_repo(path, {"mod.py": numbered(5)})
    return path


def test_command_pins_the_output_config_once_per_item() -> None:
    cmd = g.command(["status"])
    assert cmd[0] == "git" and cmd[-1] == "status"
    pinned = [cmd[i + 1] for i, arg in enumerate(cmd[:-1]) if arg == "-c"]
    assert pinned == list(g.PINNED_CONFIG)


def test_text_bytes_ok_and_run_variants(repo: Path) -> None:
    head = run(["rev-parse", "HEAD"], repo)
    assert g.git(["rev-parse", "HEAD"], repo) == head + "\n"
    assert g.git_text(["rev-parse", "HEAD"], repo) == head
    assert g.git_bytes(["rev-parse", "HEAD"], repo) == (head + "\n").encode()
    assert g.git_ok(["cat-file", "-e", head], repo)
    assert not g.git_ok(["cat-file", "-e", "0" * 40], repo)
    proc = g.run(["rev-parse", "--verify", "nope"], repo)
    assert proc.returncode != 0 and proc.stderr


def test_failure_raises_git_error_naming_the_command(repo: Path) -> None:
    with pytest.raises(GitError, match=r"git rev-parse --verify nope .* failed"):
        g.git(["rev-parse", "--verify", "nope"], repo)
    assert g.git_text(["rev-parse", "--verify", "nope"], repo, check=False) == ""


def test_pinned_config_wins_over_the_repository_config(repo: Path) -> None:
    run(["config", "core.abbrev", "20"], repo)
    short = g.git_text(["log", "-1", "--format=%h"], repo)
    assert len(short) == 12


def test_rev_resolves_or_returns_empty(repo: Path) -> None:
    head = run(["rev-parse", "HEAD"], repo)
    assert g.rev(repo, "HEAD") == head
    assert g.rev(repo, "v1^{commit}") == head
    assert g.rev(repo, "refs/heads/absent") == ""


def test_patch_id_ignores_line_offsets_and_commit_metadata(repo: Path) -> None:
    base = run(["rev-parse", "HEAD"], repo)
    commit(repo, "change 3", {"mod.py": ["line 1", "line 2", "CHANGED", "line 4", "line 5"]})
    first = g.format_patch(repo, "HEAD^!")
    run(["checkout", "-q", "-b", "other", base], repo)
    commit(repo, "other message", {"mod.py": ["line 1", "line 2", "CHANGED", "line 4", "line 5"]})
    again = g.format_patch(repo, "HEAD^!")
    assert first != again
    assert g.patch_id(repo, first) == g.patch_id(repo, again) != ""
    assert g.patch_id(repo, b"") == ""
    both = g.patch_ids(repo, first + again)
    assert [pid for pid, _ in both] == [g.patch_id(repo, first)] * 2


def test_git_timeout_reports_exit_code_and_last_stderr_line(repo: Path) -> None:
    code, why = g.git_timeout(["rev-parse", "--verify", "nope"], repo, 30.0)
    assert code not in (None, 0)
    assert why.startswith("fatal")
    assert g.git_timeout(["status", "-s"], repo, 30.0) == (0, "")


def test_git_env_drops_prompts_and_locale() -> None:
    env = g.git_env({"EXTRA": "1"})
    assert env["GIT_TERMINAL_PROMPT"] == "0" and env["LC_ALL"] == "C" and env["EXTRA"] == "1"
    assert subprocess.run(["git", "--version"], env=env, capture_output=True).returncode == 0
