"""The DCO rule: where an upstream's CONTRIBUTING asks for it, every patch needs a
`Signed-off-by:` by its author."""

from __future__ import annotations

import re
from pathlib import Path

from ..model.manifest import Upstream
from ..model.series import Patch
from ..source.detect import STANDIN, Source
from .model import Finding

# docs/developer/contribute.md: Megatron-LM's CONTRIBUTING.md only links that page.
CONTRIBUTING_FILES = (
    "CONTRIBUTING.md",
    "CONTRIBUTING.rst",
    ".github/CONTRIBUTING.md",
    "docs/developer/contribute.md",
)
# Megatron-LM's docs/developer/contribute.md asks for Signed-off-by ("Signing Your Work") since
# core_v0.19.0 (not at core_v0.16.1); the stand-in is a 0.19 release.
STANDIN_SIGNOFF: dict[str, bool] = {"Megatron-LM": True}


def signoff_rule(repo: Path, up: Upstream, source: Source) -> tuple[bool | None, str]:
    """(is a Signed-off-by required, why we think so); None: unknown here."""
    present = [name for name in CONTRIBUTING_FILES if (repo / name).is_file()]
    asking = [
        name
        for name in present
        if "signed-off-by" in (repo / name).read_text("utf-8", errors="replace").lower()
    ]
    if asking:
        return True, f"{asking[0]} asks for Signed-off-by"
    if present:
        return False, f"{present[0]} does not ask for Signed-off-by"
    if source.kind == STANDIN and up.name in STANDIN_SIGNOFF:
        asks = STANDIN_SIGNOFF[up.name]
        return (
            asks,
            f"recorded: {up.name}'s contributing guide {'asks' if asks else 'does not ask'} for Signed-off-by (the stand-in lacks it)",
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
