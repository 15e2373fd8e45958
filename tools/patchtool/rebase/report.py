"""The rebase result as a terminal table and as a Markdown report (deterministic: no dates).

The report is what a reviewer reads before accepting a pin move: per patch what happened,
which evidence fired (and which could not be checked), merged or conflicting hunks, and the
range-diff of the old against the new series.
"""

from __future__ import annotations

import shlex

from .result import (
    CLEAN,
    CONFLICT,
    MERGED_3WAY,
    OFFSET,
    RESOLVED,
    UPSTREAMED,
    Base,
    PatchResult,
    RebaseResult,
)


def base_text(base: Base) -> str:
    kind = "git history" if base.history else "release stand-in, no upstream history"
    commit = base.upstream_commit[:12] if base.upstream_commit else "commit unknown offline"
    return f"{base.label} ({commit}; {kind})"


def detail(res: PatchResult) -> str:
    """One line saying why a patch got its class."""
    if res.classification == UPSTREAMED:
        text = "; ".join(f"{e.kind}: {e.detail}" for e in res.evidence)
    elif res.classification == OFFSET:
        text = "; ".join(res.offsets)
    elif res.classification == MERGED_3WAY:
        text = "3-way merged in " + ", ".join(res.failed_files or ["?"])
    elif res.classification == CONFLICT:
        text = "conflict in " + ", ".join(res.conflict_files or ["?"])
    elif res.classification == RESOLVED:
        text = "conflict resolved by hand in the scratch tree"
    else:
        text = "applies at its recorded lines"
    return f"{text} ({res.note})" if res.note else text


def summary(result: RebaseResult) -> str:
    counts: dict[str, int] = {}
    for res in result.patches:
        counts[res.classification] = counts.get(res.classification, 0) + 1
    order = (CLEAN, OFFSET, MERGED_3WAY, RESOLVED, CONFLICT, UPSTREAMED)
    parts = [f"{counts[c]} {c}" for c in order if counts.get(c)]
    return ", ".join(parts) if parts else "empty series"


def lacks_note(result: RebaseResult) -> str:
    """The new base beside the pin rather than after it, said before the per-patch table."""
    if not result.lacks or result.backwards:
        return ""
    return (
        f"{result.new.label} lacks {result.lacks} commits of the pin; conflicts below may come "
        "from those"
    )


def table(result: RebaseResult) -> str:
    """The terminal table printed by `rebase`."""
    rows = [("#", "patch", "result", "detail")]
    for index, res in enumerate(result.patches, 1):
        rows.append((str(index), res.name, res.classification, detail(res)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [
        f"{result.upstream}: {base_text(result.old)} -> {base_text(result.new)}",
    ]
    if note := lacks_note(result):
        lines.append(f"note: {note}")
    for row in rows:
        lines.append(
            "  ".join(c.ljust(w) for c, w in zip(row[:3], widths, strict=True)) + "  " + row[3]
        )
    lines.append(f"summary: {summary(result)}")
    return "\n".join(lines)


def _fence(text: str, lang: str = "") -> list[str]:
    fence = "````" if "```" in text else "```"
    return [f"{fence}{lang}", text.rstrip("\n"), fence]


def markdown(result: RebaseResult, command: list[str], source_note: str) -> str:
    """The Markdown report written next to the rebase (docs/rebases/ or the scratch dir)."""
    out = [
        f"# Rebase of the {result.upstream} series: {result.old.label} → {result.new.label}",
        "",
        f"- Command: `{shlex.join(command)}`",
        f"- Old base: {base_text(result.old)}",
        f"- New base: {base_text(result.new)}"
        + (f", committed {result.new.date}" if result.new.date else ""),
    ]
    if result.backwards:
        out.append("- The new base is older than the pin: this moves the pin backwards")
    if note := lacks_note(result):
        out.append(f"- {note}")
    if source_note:
        out.append(f"- Stand-ins used because: {source_note}")
    out += [f"- Result: {summary(result)}", ""]
    out += ["| # | patch | result | evidence / detail |", "|---|---|---|---|"]
    for index, res in enumerate(result.patches, 1):
        cell = detail(res).replace("|", "\\|")
        out.append(f"| {index} | `{res.name}` | {res.classification} | {cell} |")
    out.append("")
    for res in result.patches:
        out += [f"## `{res.name}`: {res.classification}", "", f"Subject: {res.subject}", ""]
        if res.evidence:
            out.append("Evidence that upstream has the change:")
            out += [f"- {e.kind}: {e.detail}" for e in res.evidence]
            out.append("")
        if res.not_checked:
            out.append("Not checked:")
            out += [f"- {n}" for n in res.not_checked]
            out.append("")
        if res.offsets:
            out.append("Hunks at shifted lines (exact context, no fuzz):")
            out += [f"- {o}" for o in res.offsets]
            out.append("")
        if res.hunks:
            what = (
                "Merged hunks"
                if res.classification == MERGED_3WAY
                else "Conflict (markers left in the scratch tree)"
            )
            out += [f"{what}:", "", *_fence(res.hunks, "diff"), ""]
        if res.note:
            out += [f"Note: {res.note}", ""]
    if result.finish_commands:
        out += [
            "## Finish by hand",
            "",
            *_fence("\n".join(shlex.join(c) for c in result.finish_commands), "sh"),
            "",
        ]
    out += ["## range-diff (old series vs new series)", ""]
    out += [*_fence(result.range_diff or "(empty)"), ""]
    return "\n".join(out)
