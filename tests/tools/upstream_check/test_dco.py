"""upstream_check/dco.py: a Signed-off-by by the patch's author."""

from __future__ import annotations

from pathlib import Path

from tests.tools.sandbox import TRAILERS
from tests.tools.upstream_check.hooks import SIGNOFF
from tools.patchtool.model.series import parse_patch_text
from tools.patchtool.upstream_check.dco import dco_findings


def _mbox(trailers: str, author: str = "Test Dev <dev@example.invalid>") -> str:
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"From: {author}\nDate: Mon, 1 Jan 2024 00:00:00 +0000\nSubject: Fix it\n\n"
        f"Why.\n\n{trailers}---\ndiff --git a/a.py b/a.py\n"
    )


def test_dco_needs_a_signoff_by_the_author() -> None:
    def dco(trailers: str) -> list[str]:
        patch = parse_patch_text(_mbox(trailers), Path("x.patch"))
        return [f.message for f in dco_findings(patch, "x.patch")]

    assert dco(TRAILERS + SIGNOFF) == []
    assert "no Signed-off-by line" in dco(TRAILERS)[0]
    assert "not by the author" in dco(TRAILERS + "Signed-off-by: Other <o@example.invalid>\n")[0]
