"""The `sandbox` fixture: git isolated from the machine's config, in a temp dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.sandbox import Sandbox


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    """Git isolated from the machine's config (no mirrors), file:// submodules allowed."""
    config = tmp_path / "gitconfig"
    config.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.file.allow")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "always")
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Test Dev")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "dev@example.invalid")
    return Sandbox(tmp_path)
