"""The `sandbox` fixture: git isolated from the machine's config, in a temp dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.repos import isolate_git
from tests.tools.sandbox import Sandbox


@pytest.fixture
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Git calls ignore the machine's global and system config (mirrors, user prefs)."""
    isolate_git(monkeypatch, tmp_path)


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_git: None) -> Sandbox:
    """Git isolated from the machine's config (no mirrors), file:// submodules allowed."""
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.file.allow")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "always")
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Test Dev")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "dev@example.invalid")
    return Sandbox(tmp_path)
