"""The `upstream` fixture of the rebase tests: tag v1 with `MOD` (40 lines) and pkg/other.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.rebase.scenario import MOD
from tests.tools.repos import init_repo, numbered


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    repo = tmp_path / "upstream"
    init_repo(repo, {MOD: numbered(40), "pkg/other.py": numbered(5, "other")})
    return repo
