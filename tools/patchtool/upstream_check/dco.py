"""The DCO rule: where an upstream's CONTRIBUTING asks for it, every patch needs a
`Signed-off-by:` by its author."""

from __future__ import annotations

import re
from pathlib import Path

from ..core.manifest import Upstream
from ..core.series import Patch
from ..source.detect import STANDIN, Source
from .model import Finding

CONTRIBUTING_FILES = ("CONTRIBUTING.md", "CONTRIBUTING.rst", ".github/CONTRIBUTING.md")
# Megatron-LM's CONTRIBUTING.md (core_v0.16.1, core_v0.19.0) does not ask for Signed-off-by.
STANDIN_SIGNOFF: dict[str, bool] = {"Megatron-LM": False}


def signoff_rule(repo: Path, up: Upstream, source: Source) -> tuple[bool | None, str]:
    """(is a Signed-off-by required, why we think so); None: unknown here."""
    for name in CONTRIBUTING_FILES:
        path = repo / name
        if path.is_file():
            asks = "signed-off-by" in path.read_text("utf-8", errors="replace").lower()
            return asks, f"{name} {'asks' if asks else 'does not ask'} for Signed-off-by"
    if source.kind == STANDIN and up.name in STANDIN_SIGNOFF:
        asks = STANDIN_SIGNOFF[up.name]
        return (
            asks,
            f"recorded: {up.name}'s CONTRIBUTING.md {'asks' if asks else 'does not ask'} for Signed-off-by (the stand-in lacks it)",
        )
    if source.kind == STANDIN:
        return None, "CONTRIBUTING.md not available on the stand-in: DCO not checked"
    return False, "no CONTRIBUTING.md: the upstream states no DCO rule"


def dco_findings(patch: Patch, patch_file: str) -> list[Finding]:
    """DCO: a `Signed-off-by:` line in the message, by the author (what the DCO app checks)."""
    signoffs = [
        (num, text.split(":", 1)[1].strip())
        for num, text in patch.body
        if text.lower().startswith("signed-off-by:")
    ]
    line = patch.subject_line or 1
    if not signoffs:
        fix = "add `Signed-off-by: Name <email>` to the trailers (git commit -s) and re-export"
        return [Finding("dco", patch_file, line, f"no Signed-off-by line; {fix}")]
    emails = {m.lower() for _, v in signoffs for m in re.findall(r"<([^>]+)>", v)}
    if patch.author_email and patch.author_email.lower() not in emails:
        return [
            Finding(
                "dco",
                patch_file,
                signoffs[0][0],
                f"Signed-off-by is not by the author <{patch.author_email}>; "
                "the DCO check wants the author's own sign-off",
            )
        ]
    return []
