"""`verify --record`: the upstream-test figures as docs/upstream-tests.json, which the status
page (status_page/) renders.

Why a file: the status page is regenerated and checked (`report --check`) without running the
upstream suites (minutes); the figures are measured by `verify --record` and committed with the
series they describe (each patch file's sha256 is recorded, so a stale row shows).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from ..model.manifest import load_manifest
from ..model.ports import find_port
from ..model.test_suites import MAIN_RECORD_PATH, RECORD_PATH

if TYPE_CHECKING:
    from .session import StackResult
    from .upstream_proof import UpstreamProof


def record_data(root: Path, result: StackResult) -> dict[str, object]:
    """The record's content: per upstream its gate and per patch its upstream test."""
    manifest = load_manifest(root)
    upstreams: dict[str, object] = {}
    gates = {gate.upstream: gate for gate in result.gates}
    for name in sorted({p.upstream for p in result.upstream} | set(gates)):
        up = manifest.upstreams[name]
        gate = gates.get(name)
        patches = {}
        for proof in (p for p in result.upstream if p.upstream == name):
            counts = gate.per_patch.get(proof.patch) if gate else None
            patch_file = root / up.series_dir / proof.patch
            patches[proof.patch] = {
                "sha256": hashlib.sha256(patch_file.read_bytes()).hexdigest(),
                "upstream_tests": proof.tests,
                "verdict": proof.verdict,
                "detail": proof.detail,
                "gate_dirs": proof.gate_dirs,
                "deferred_dirs": proof.deferred_dirs,
                "gate": asdict(counts) if counts else None,
            }
        upstreams[name] = {
            "baseline": gate.baseline if gate else "",
            "gate_dirs": gate.dirs if gate else [],
            "gate": asdict(gate.total) if gate else None,
            "deferred": gate.deferred if gate else {},
            "broken": [asdict(b) for b in gate.broken] if gate else [],
            "patches": patches,
        }
    return {"upstreams": upstreams, "seconds": result.seconds}


def _keep_others(path: Path, data: dict[str, object]) -> dict[str, object]:
    """`data` with the upstreams this run did not verify kept from the record at `path` (a
    `verify --record Megatron-LM` must not erase the other upstreams' figures); for the record
    on main, only when it was made on the same ref."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return data
    if not isinstance(old, dict) or old.get("ref") != data.get("ref"):
        return data
    upstreams = data["upstreams"]
    assert isinstance(upstreams, dict)
    kept = {k: v for k, v in (old.get("upstreams") or {}).items() if k not in upstreams}
    return {**data, "upstreams": dict(sorted({**kept, **upstreams}.items()))}


def write_record(root: Path, result: StackResult) -> Path:
    path = root / RECORD_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _keep_others(path, record_data(root, result))
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def main_record_data(
    root: Path,
    ref: str,
    replays: list[tuple[str, str, list[str], dict[str, str]]],
    proofs: list[UpstreamProof],
) -> dict[str, object]:
    """`verify --on main --record`: per upstream the commit its series was replayed on, which
    patches went in from their port and which did not apply, and per patch its proof there
    (with the patch file's and its port's sha256, so the page can tell a stale row)."""
    manifest = load_manifest(root)
    upstreams: dict[str, object] = {}
    for name, commit, ported, left_out in replays:
        up = manifest.upstreams[name]
        patches: dict[str, object] = {}
        for proof in (p for p in proofs if p.upstream == name):
            patch_file = root / up.series_dir / proof.patch
            port = find_port(patch_file)
            patches[proof.patch] = {
                "sha256": hashlib.sha256(patch_file.read_bytes()).hexdigest(),
                "port_sha256": hashlib.sha256(port.read_bytes()).hexdigest() if port else "",
                "upstream_tests": proof.tests,
                "with_fix": proof.with_fix,
                "without_fix": proof.without_fix,
                "verdict": proof.verdict,
                "detail": proof.detail,
                "without_detail": proof.without_detail,
            }
        upstreams[name] = {
            "commit": commit,
            "ported": ported,
            "left_out": left_out,
            "patches": patches,
        }
    return {"ref": ref, "upstreams": upstreams}


def write_main_record(root: Path, data: dict[str, object]) -> Path:
    path = root / MAIN_RECORD_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _keep_others(path, data)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path
