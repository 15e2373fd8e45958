"""What only the outside world can say about a patch: its PR's state, whether it still applies
to the upstream head, and its tripwire there. Measured when asked (`report --measure`),
otherwise carried forward from the committed page for the same patch bytes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from .rows import PatchRow

UNKNOWN = "unknown offline"
NOT_MEASURED = "not measured"
GH_TIMEOUT_S = 30.0
VERDICTS = ("fails without the patch", "passes without the patch")
PORT_APPLIES, PORT_FAILS = "port applies", "port does not apply"


@dataclass(frozen=True)
class Measurement:
    """The live fields of one patch and when/against what they were measured."""

    pr_state: str = NOT_MEASURED
    head: str = NOT_MEASURED  # clean | offset | merged-3way | conflict | upstreamed
    head_commit: str = ""
    tripwire: str = NOT_MEASURED
    measured: str = ""  # YYYY-MM-DD
    sha256: str = ""
    tripwire_measured: str = ""  # YYYY-MM-DD the tripwire verdict was last measured
    port: str = ""  # PORT_APPLIES / PORT_FAILS on the same head; "" when the patch has no port
    port_sha256: str = ""  # the port file measured (a changed port is measured again)
    # How the patch applies on its upstream's feeder branch (manifest `feeder`, e.g.
    # Megatron-LM's dev), "" when never measured there; where it conflicts, the commits that
    # moved its lines (rebase/conflict_cause.py), "; "-joined.
    feeder: str = ""
    feeder_commit: str = ""
    feeder_measured: str = ""  # YYYY-MM-DD
    feeder_cause: str = ""
    # Open or merged-after-the-pin upstream PRs on the patch's lines that make the same fix or
    # conflict (prs/scan.py `cell`), measured from a git dir with refs/pull/*; date "" = never.
    upstream_prs: str = ""
    upstream_prs_measured: str = ""  # YYYY-MM-DD


def previous(json_path: Path) -> dict[tuple[str, str], Measurement]:
    """The measurements of the committed page, by (upstream, patch); {} when there is none."""
    if not json_path.is_file():
        return {}
    data = json.loads(json_path.read_text(encoding="utf-8"))
    out = {}
    for row in data.get("patches", []):
        recorded = dict(row["measurement"])
        if recorded.get("tripwire") in VERDICTS and not recorded.get("tripwire_measured"):
            recorded["tripwire_measured"] = recorded.get("measured", "")  # older pages
        fields = {k: recorded[k] for k in Measurement.__dataclass_fields__ if k in recorded}
        out[(row["upstream"], row["name"])] = Measurement(**fields)
    return out


def carried(row: PatchRow, old: dict[tuple[str, str], Measurement]) -> Measurement:
    """The earlier measurement when the patch file and its port are byte-identical, else
    nothing measured."""
    prior = old.get(row.key)
    if prior is None or (prior.sha256, prior.port_sha256) != (row.sha256, row.port_sha256):
        return Measurement()
    return prior


def measurement_gaps(
    rows: list[PatchRow], live: list[Measurement], heads: dict[str, str], branch: str
) -> list[str]:
    """Why the page is not measured against `heads` (upstream -> the commit its `branch` is at,
    for the upstreams whose history is at hand): a row never measured there, or measured on
    another commit. One line per upstream; [] when every such row is measured on its head."""
    gaps = []
    for upstream, head in heads.items():
        mine = [(r, m) for r, m in zip(rows, live, strict=True) if r.upstream == upstream]
        unmeasured = [r.name for r, m in mine if not m.head_commit]
        elsewhere = sorted({m.head_commit[:12] for _, m in mine if m.head_commit} - {head[:12]})
        if unmeasured:
            gaps.append(
                f"{upstream}: {len(unmeasured)} of {len(mine)} patches not measured on its "
                f"{branch} ({head[:12]}), e.g. {unmeasured[0]}"
            )
        elif elsewhere:
            gaps.append(
                f"{upstream}: measured on {', '.join(elsewhere)}, but its {branch} is at {head[:12]}"
            )
    return gaps


def feeder_gaps(
    rows: list[PatchRow], live: list[Measurement], heads: dict[str, tuple[str, str]]
) -> list[str]:
    """Why the page is not measured on the feeder branches at hand (upstream -> (branch, the
    commit it is at)): a row never measured there, or measured on another commit."""
    gaps = []
    for upstream, (branch, head) in heads.items():
        mine = [m for r, m in zip(rows, live, strict=True) if r.upstream == upstream]
        off = [m for m in mine if m.feeder_commit[:12] != head[:12]]
        if off:
            gaps.append(
                f"{upstream}: {len(off)} of {len(mine)} patches not measured on its {branch} "
                f"({head[:12]})"
            )
    return gaps


def kept_tripwire(prior: Measurement, head_commit: str) -> tuple[str, str] | None:
    """The earlier tripwire verdict and its date, while it still holds: a real verdict for these
    patch bytes (`carried` already checked them) measured on the same upstream head."""
    if prior.tripwire in VERDICTS and prior.head_commit == head_commit and head_commit:
        return prior.tripwire, prior.tripwire_measured or prior.measured
    return None


def pr_state(row: PatchRow, gh: str | None = None) -> str:
    """OPEN / MERGED / CLOSED from `gh pr view` (argv only), "no PR recorded", or unknown."""
    if not row.pr_number:
        return "no PR recorded"
    gh_path = gh if gh is not None else shutil.which("gh")
    if not gh_path:
        return UNKNOWN
    cmd = [gh_path, "pr", "view", str(row.pr_number), "--repo", row.pr_repo]
    try:
        proc = subprocess.run(
            [*cmd, "--json", "state", "--jq", ".state"],
            capture_output=True,
            text=True,
            timeout=GH_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return UNKNOWN
    state = proc.stdout.strip()
    return state if proc.returncode == 0 and state else UNKNOWN


def to_json(m: Measurement) -> dict[str, str]:
    return asdict(m)
