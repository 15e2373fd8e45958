"""`tools/patches status [UPSTREAM...] [--json]`: per upstream the pin, the source kind, the
patches applied and HEAD's state (source/state.py), and its nested wiring (source/nested_wiring.py:
which of its `[tool.uv.sources]` paths are linked to our checkouts). Reports only: exit OK.
"""

from __future__ import annotations

import argparse
import json

from ..command import Command, root_of
from ..model.manifest import load_manifest
from ..source.detect import MISSING
from ..source.nested_wiring import link_line, wiring_status
from ..source.state import upstream_status


def _human(row: dict[str, object]) -> str:
    pin = f"{row['tag'] or '(no tag)'} {str(row['commit'])[:12]}"
    total = row["patches_total"] if row["patches_total"] is not None else "?"
    clean = {True: "clean", False: "DIRTY", None: "-"}[row["clean"]]  # type: ignore[index]
    state = "yes" if row["patched_state"] else "no"
    gitlink = (
        "ok"
        if row["gitlink_staged"] == row["commit"]
        else f"STAGED {str(row['gitlink_staged'])[:12] or 'none'} != pin"
    )
    lines = [
        f"{row['name']}: pin {pin}, source {row['source']} ({row['source_detail']})",
        f"  patches {row['patches_applied']}/{total} applied, {clean}, expected patched state: {state}, gitlink {gitlink}",
        f"  {row['note']}",
    ]
    if row["dirty_files"]:
        lines.append("  uncommitted: " + ", ".join(str(f)[3:] for f in row["dirty_files"]))  # type: ignore[union-attr]
    for label in row["patch_labels"]:  # type: ignore[union-attr]
        lines.append(f"  {label['patch']}: {label['label']} [{row['proxy']}]")
    wiring = row["wiring"]
    if wiring["links"] or row["source"] == MISSING:  # type: ignore[index]
        lines.append(f"  nested wiring: {wiring['note']}")  # type: ignore[index]
    for link in wiring["links"]:  # type: ignore[index]
        lines.append(f"    {link_line(link, origin=True)}")
    return "\n".join(lines)


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("upstreams", nargs="*", metavar="UPSTREAM")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _run(args: argparse.Namespace) -> int:
    root = root_of(args)
    manifest = load_manifest(root)
    rows = [upstream_status(root, up) for up in manifest.select(args.upstreams)]
    for row, up in zip(rows, manifest.select(args.upstreams), strict=True):
        row["wiring"] = wiring_status(root, manifest, up)
    if args.json:
        print(json.dumps({"upstreams": rows}, indent=2))
    else:
        print("\n".join(_human(row) for row in rows))
    return 0


STATUS = Command(
    "status", "pin, source kind, applied patches and state per upstream", _configure, _run
)
