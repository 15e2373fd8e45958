"""model/ports.py: where a port lives, which one open-pr takes, and lint's rules (no git)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.patchtool.errors import PatchToolError
from tools.patchtool.model.ports import find_port, port_problems, pr_port, refuse_port

PIN = b"""From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: Ada Lovelace <ada@example.org>
Date: Fri, 27 Nov 2026 00:00:00 +0000
Subject: Fix line ten

Why: a test fix.

Upstream-Status: pending
Origin: mcore-rl-stack
Test: tests/test_x.py::test_fix
---
diff --git a/m.py b/m.py
index 1111111111111111111111111111111111111111..2222222222222222222222222222222222222222 100644
--- a/m.py
+++ b/m.py
@@ -1 +1 @@
-line 10
+fixed 10
"""


@pytest.fixture
def series(tmp_path: Path) -> Path:
    up = tmp_path / "patches" / "Up"
    (up / "main").mkdir(parents=True)
    (up / "fix.patch").write_bytes(PIN)
    return up


def port_with(series: Path, data: bytes) -> Path:
    port = series / "main" / "fix.patch"
    port.write_bytes(data.replace(b"-line 10", b"-main's 10"))
    return port


def test_open_pr_takes_the_port_only_for_main_without_onto(series: Path) -> None:
    pin = series / "fix.patch"
    assert find_port(pin) is None and pr_port(pin, "main", "") is None
    port = port_with(series, PIN)
    assert pr_port(pin, "main", "") == port
    assert pr_port(pin, "main", "v1") is None  # --onto: the pin patch
    assert pr_port(pin, "release", "") is None


def test_a_port_may_change_only_its_diff(series: Path) -> None:
    port_with(series, PIN)
    assert port_problems(series, {"fix.patch"}) == []
    port_with(series, PIN.replace(b"Why: a test fix.", b"Why: another fix."))
    [(path, _, why)] = port_problems(series, {"fix.patch"})
    assert path.name == "fix.patch" and "commit message differs" in why
    port_with(series, PIN.replace(b"Date: Fri, 27 Nov", b"Date: Sat, 28 Nov"))
    assert "author or date differs" in port_problems(series, {"fix.patch"})[0][2]
    port_with(series, PIN.replace(b"Subject: Fix line ten", b"Subject: Fix it"))
    assert "subject 'Fix it'" in port_problems(series, {"fix.patch"})[0][2]


def test_orphan_port_and_port_paths_refused(series: Path) -> None:
    port = port_with(series, PIN)
    assert "orphan port" in port_problems(series, set())[0][2]
    with pytest.raises(
        PatchToolError, match=r"is a port: give the pin patch patches/Up/fix\.patch"
    ):
        refuse_port(port, "Up")
    refuse_port(series / "fix.patch", "Up")
