"""`roll` on the real upstream histories, from older coherent triples forward to our pins.

Needs full (not shallow) bare clones of the three upstreams, outside the repository:
`PATCHTOOL_TEST_HISTORY_DIR=DIR` holding `DIR/<Upstream>.git` (what `git clone --bare` of
each GitHub URL gives). They are large and not on CI, so these tests skip without them.

The triples are real: NeMo-RL 8ef0de9dd164 (2026-02-13) nests Megatron-Bridge 15398e08fc86,
which nests Megatron-LM bbbedbb9f533 -- before upstream commit 261183027eb8 ("Fix for rl",
#3390) merged the tokenizer and unified-memory fixes we carried until Megatron-Core 0.17.0.
NeMo-RL 8863ebeff (2026-08-21) nests our Bridge and Megatron-LM pins, so only NeMo-RL moves.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools.repos import run
from tests.tools.sandbox import REPO_ROOT
from tools.patchtool.model.manifest import load_manifest, set_pin

HISTORY_ENV = "PATCHTOOL_TEST_HISTORY_DIR"
NAMES = ("Megatron-LM", "Megatron-Bridge", "NeMo-RL")
OLD_TOP = "8ef0de9dd164"  # nests Bridge 15398e08fc86 -> Megatron-LM bbbedbb9f533
NEAR_TOP = "8863ebeff172"  # nests our Bridge and Megatron-LM pins
BRIDGE_FIX = "2eb1af6287871a0f69b5ed6864bc2b0282d81b27"  # LoRATopKRouter forward args (#2482)
MERGED = "261183027eb815226b24547ccc6e29b3dc13df2a"  # Megatron-LM "Fix for rl" (#3390)
PATCHES = REPO_ROOT / "patches"


def _history() -> Path:
    value = os.environ.get(HISTORY_ENV, "")
    if not value:
        pytest.skip(f"{HISTORY_ENV} is not set: no full upstream histories on this machine")
    directory = Path(value)
    for name in NAMES:
        bare = directory / f"{name}.git"
        shallow = run(["rev-parse", "--is-shallow-repository"], bare, check=False)
        if shallow != "false":
            pytest.skip(f"{bare} is absent or shallow: the roll needs full history")
    return directory


def _rev(history: Path, name: str, ref: str) -> str:
    return run(["rev-parse", ref], history / f"{name}.git")


def _chain(history: Path, top: str) -> dict[str, str]:
    """The triple NeMo-RL@top names: {upstream: commit}."""
    nemo = _rev(history, "NeMo-RL", f"{top}^{{commit}}")
    bridge = _rev(history, "NeMo-RL", f"{nemo}:3rdparty/Megatron-Bridge-workspace/Megatron-Bridge")
    mlm = _rev(history, "Megatron-Bridge", f"{bridge}:3rdparty/Megatron-LM")
    return {"NeMo-RL": nemo, "Megatron-Bridge": bridge, "Megatron-LM": mlm}


def _pending(data: bytes) -> bytes:
    """The patch as carried before upstream merged it: no `accepted` status to lean on, so
    the evidence must come from the upstream history itself."""
    return re.sub(rb"(?m)^Upstream-Status: .*$", b"Upstream-Status: submitted", data)


def _superproject(
    tmp: Path, pins: dict[str, str], series: dict[str, list[tuple[str, bytes]]]
) -> Path:
    """Our manifest and .gitmodules, pinned at `pins`, carrying `series`."""
    root = tmp / "super"
    (root / "patches").mkdir(parents=True)
    run(["init", "-q", "-b", "main"], root)
    text = (PATCHES / "upstreams.toml").read_text(encoding="utf-8")
    for name, commit in pins.items():
        text = set_pin(text, name, tag="", commit=commit)
        (root / "patches" / name).mkdir()
        patches = series.get(name, [])
        for patch_name, data in patches:
            (root / "patches" / name / patch_name).write_bytes(data)
        (root / "patches" / name / "series").write_text("".join(f"{n}\n" for n, _ in patches))
    (root / "patches/upstreams.toml").write_text(text, encoding="utf-8")
    shutil.copy(REPO_ROOT / ".gitmodules", root / ".gitmodules")
    run(["add", "patches", ".gitmodules"], root)
    for up in load_manifest(root).upstreams.values():
        run(["update-index", "--add", "--cacheinfo", f"160000,{up.commit},{up.path}"], root)
    run(["commit", "-q", "-m", "old triple"], root)
    return root


def _roll(root: Path, history: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_CONFIG_")}
    env.update(GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
    for role in ("AUTHOR", "COMMITTER"):
        env[f"GIT_{role}_NAME"] = "Roller"
        env[f"GIT_{role}_EMAIL"] = "roller@example.invalid"
    cmd = [sys.executable, str(REPO_ROOT / "tools/patches"), "--root", str(root), "roll"]
    cmd += ["--mirror-dir", str(history), "--no-tripwires", "--json", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)


def _verdicts(payload: dict[str, object]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for row in payload["triple"]:  # type: ignore[union-attr]
        result = row["result"]  # type: ignore[index]
        out[row["upstream"]] = {p["name"]: p["classification"] for p in result["patches"]}  # type: ignore[index]
    return out


def _ours(name: str) -> list[tuple[str, bytes]]:
    series = (PATCHES / name / "series").read_text().split()
    return [(n, (PATCHES / name / n).read_bytes()) for n in series]


def test_roll_from_before_0_17_retires_what_megatron_lm_merged(tmp_path: Path) -> None:
    """Megatron-LM bbbedbb9 -> our pin: the two fixes upstream merged in #3390 are retired with
    evidence from the history; our other two patches are kept clean. Bridge 15398e08 -> our pin:
    a Bridge fix carried before upstream merged it (#2482) is retired by its patch-id."""
    history = _history()
    manifest = load_manifest(REPO_ROOT)
    target = manifest.upstreams["NeMo-RL"].commit
    upstreamed = PATCHES / "Megatron-LM" / "upstreamed"
    mlm = [
        (p.name, _pending(p.read_bytes()))
        for p in sorted(upstreamed.glob("*.patch"))
        if f"accepted {MERGED}" in p.read_text()
    ]
    assert len(mlm) == 2
    fix = run(["format-patch", "--stdout", f"{BRIDGE_FIX}^!"], history / "Megatron-Bridge.git")
    series = {
        "Megatron-LM": [*mlm, *_ours("Megatron-LM")],
        "Megatron-Bridge": [("lora-topk-router-forward-args.patch", (fix + "\n").encode())],
    }
    old = _chain(history, OLD_TOP)
    root = _superproject(tmp_path, old, series)
    proc = _roll(root, history, "--to-nemo-rl", target)
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["decision"] == "move" and payload["commit"]
    assert {r["upstream"]: r["to"] for r in payload["triple"]} == {
        name: manifest.upstreams[name].commit for name in NAMES
    }
    verdicts = _verdicts(payload)
    assert verdicts["Megatron-LM"] == {
        **{name: "upstreamed" for name, _ in mlm},
        **{name: "clean" for name, _ in _ours("Megatron-LM")},
    }
    assert verdicts["Megatron-Bridge"] == {"lora-topk-router-forward-args.patch": "upstreamed"}
    evidence = {
        p["name"]: {e["kind"] for e in p["evidence"]}
        for row in payload["triple"]
        for p in row["result"]["patches"]
    }
    assert "patch-id" in evidence["lora-topk-router-forward-args.patch"]
    assert all(evidence[name] & {"reverse", "merge-noop"} for name, _ in mlm)
    # The one commit: pins at the triple, retired patches with their evidence, the rest kept.
    assert run(["status", "--porcelain", "--", "patches", "docs"], root) == ""
    for up in load_manifest(root).upstreams.values():
        assert run(["ls-files", "-s", up.path], root).split()[1] == up.commit
    for name, _ in mlm:
        assert "Upstream-Evidence:" in (root / f"patches/Megatron-LM/upstreamed/{name}").read_text()
    kept = (root / "patches/Megatron-LM/series").read_text().split()
    assert kept == [name for name, _ in _ours("Megatron-LM")]


def test_roll_moves_nemo_rl_alone_and_keeps_its_patches(tmp_path: Path) -> None:
    """NeMo-RL 8863ebeff -> our pin (7 commits of upstream main): our four NeMo-RL patches
    still apply at their recorded lines; Bridge and Megatron-LM stay (same nested pins)."""
    history = _history()
    manifest = load_manifest(REPO_ROOT)
    old = _chain(history, NEAR_TOP)
    assert old["Megatron-Bridge"] == manifest.upstreams["Megatron-Bridge"].commit
    root = _superproject(tmp_path, old, {"NeMo-RL": _ours("NeMo-RL")})
    before = run(["rev-parse", "HEAD"], root)
    proc = _roll(root, history, "--to-nemo-rl", manifest.upstreams["NeMo-RL"].commit, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["decision"] == "move" and payload["written"] == []
    assert _verdicts(payload)["NeMo-RL"] == {name: "clean" for name, _ in _ours("NeMo-RL")}
    moved = [r["upstream"] for r in payload["triple"] if r["from"] != r["to"]]
    assert moved == ["NeMo-RL"]
    assert run(["rev-parse", "HEAD"], root) == before
