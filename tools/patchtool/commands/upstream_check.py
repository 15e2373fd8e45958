"""`tools/patches upstream-check [UPSTREAM...] [--json] [--allow-missing]`: each upstream's own
formatters/linters, DCO and copyright-header rules on every patch (upstream_check/). Exit
FAILED on a finding or an error, NOT_VERIFIED when something was not checked here unless
--allow-missing, else OK.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from ..command import Command, root_of
from ..errors import ExitCode, PatchToolError
from ..model.manifest import load_manifest
from ..source.detect import STANDIN
from ..upstream_check.checks import check_upstream
from ..upstream_check.model import CheckState, UpstreamReport

# --- the command --------------------------------------------------------------------------


def render(reports: list[UpstreamReport]) -> str:
    out: list[str] = []
    for r in reports:
        head = f"{r.name}: {r.state}"
        if r.state == CheckState.CHECKED:
            head += f" ({r.finding_count} finding(s), {r.seconds:.1f} s; source {r.source})"
        out.append(head)
        if r.state in (CheckState.NOT_CHECKED, CheckState.ERROR) or r.source == STANDIN:
            out.append(f"  {r.detail}")
        out += [f"  check: {c}" for c in r.checks]
        if r.dco:
            out.append(f"  dco: {r.dco}")
        if r.copyright:
            out.append(f"  copyright: {r.copyright}")
        for p in r.patches:
            new = p.new_findings
            old = len(p.findings) - len(new)
            verdict = f"{len(new)} finding(s)" if new else "clean" if p.ran else "nothing checked"
            verdict += f", {old} pre-existing" if old else ""
            if p.adopted and new:
                verdict += f": {p.adopted}'s, to fix there (reported, not failing)"
            out.append(f"  {p.patch}: {verdict} ({len(p.files)} file(s))")
            for f in p.findings:
                tag = " [pre-existing, not from this patch]" if f.preexisting else ""
                out.append(f"    {f.file}:{f.line}: {f.check}: {f.message}{tag}")
                if f.detail and not f.preexisting:
                    out += [f"      {line}" for line in f.detail.splitlines()]
            out += [f"    note: {n}" for n in p.notes]
        if r.not_run:
            out.append(f"  not run by upstream-check: {', '.join(r.not_run)}")
        out += [f"  NOT CHECKED: {u}" for u in r.unchecked if u != r.detail]
    return "\n".join(out)


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("upstreams", nargs="*", metavar="UPSTREAM", help="default: all")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="exit 0 when an upstream (or its check config) is not available here; "
        "it is still reported as not checked",
    )


def _run(args: argparse.Namespace) -> int:
    root = root_of(args)
    reports: list[UpstreamReport] = []
    for up in load_manifest(root).select(args.upstreams):
        try:
            reports.append(check_upstream(root, up))
        except PatchToolError as exc:
            reports.append(
                UpstreamReport(up.name, "", CheckState.ERROR, " ".join(str(exc).split()))
            )
    if args.json:
        rows = [asdict(r) | {"findings": r.finding_count} for r in reports]
        print(json.dumps({"upstreams": rows}, indent=2))
    else:
        print(render(reports))
    if any(r.state == CheckState.ERROR or r.finding_count for r in reports):
        return ExitCode.FAILED
    unchecked = any(r.unchecked for r in reports)
    return ExitCode.NOT_VERIFIED if unchecked and not args.allow_missing else ExitCode.OK


UPSTREAM_CHECK = Command(
    "upstream-check",
    "run each upstream's own formatters/linters (pinned versions, its config), DCO rule and "
    "copyright header (new files) on the files each patch touches",
    _configure,
    _run,
)
