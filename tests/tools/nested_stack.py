"""A small stack shaped like ours, for the nested-wiring tests: three upstream repositories and a
superproject pinning them at `3rdparty/{Megatron-LM,Megatron-Bridge,NeMo-RL}`.

The shapes are those read at the pins: NeMo-RL's pyproject takes megatron-bridge from its
submodule path `3rdparty/Megatron-Bridge-workspace/Megatron-Bridge` (`[tool.uv.sources]`,
editable; a gitlink in its tree, named in .gitmodules), and Bridge's pyproject takes
megatron-core from its own submodule `3rdparty/Megatron-LM/`. NeMo-RL's uv.lock records both
editable paths. The packages are one-line modules so an editable install takes seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.tools.repos import run

LM, BRIDGE, RL = "Megatron-LM", "Megatron-Bridge", "NeMo-RL"
BRIDGE_IN_RL = "3rdparty/Megatron-Bridge-workspace/Megatron-Bridge"
LM_IN_BRIDGE = "3rdparty/Megatron-LM"
STANDIN_SPEC = "megatron-bridge==0.6.0"

_SETUPTOOLS = (
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
)

LM_FILES = {
    "pyproject.toml": _SETUPTOOLS
    + '\n[project]\nname = "megatron-core"\nversion = "0.20.0"\n'
    + '\n[tool.setuptools.packages.find]\ninclude = ["megatron.core", "megatron.core.*"]\n',
    "megatron/core/__init__.py": 'WHO = "our megatron-core"\n',
}
BRIDGE_FILES = {
    "pyproject.toml": _SETUPTOOLS
    + '\n[project]\nname = "megatron-bridge"\nversion = "0.6.0"\ndependencies = ["megatron-core"]\n'
    + '\n[tool.setuptools]\npackage-dir = {"" = "src"}\n'
    + '\n[tool.setuptools.packages.find]\nwhere = ["src"]\ninclude = ["megatron.bridge"]\n'
    + '\n[tool.uv.sources]\nmegatron-core = { path = "3rdparty/Megatron-LM/", editable = true }\n'
    + 'flash_mla = { git = "https://github.com/deepseek-ai/FlashMLA", rev = "nv_dev" }\n',
    "src/megatron/bridge/__init__.py": 'WHO = "our megatron-bridge"\n',
}
RL_FILES = {
    "pyproject.toml": '[project]\nname = "nemo-rl"\nversion = "0.0.1"\n'
    'dependencies = ["megatron-bridge[te,ssm]"]\n'
    "\n[tool.uv.sources]\n"
    'tensorrt-llm = { path = "3rdparty/TensorRT-LLM-workspace" }\n'
    f'megatron-bridge = {{ path = "{BRIDGE_IN_RL}", editable = true }}\n'
    'nemo_gym = { workspace = true }\ntorch = [{ index = "pytorch-cu130" }]\n',
    "uv.lock": "version = 1\n\n"
    f'[[package]]\nname = "megatron-bridge"\nsource = {{ editable = "{BRIDGE_IN_RL}" }}\n'
    'dependencies = [\n    { name = "megatron-core" },\n]\n\n'
    '[[package]]\nname = "megatron-core"\n'
    f'source = {{ editable = "{BRIDGE_IN_RL}/{LM_IN_BRIDGE}" }}\n\n'
    '[[package]]\nname = "nemo-rl"\nsource = { editable = "." }\n',
    "nemo_rl/__init__.py": "",
}


def _gitmodules(name: str, path: str, url: Path) -> dict[str, str]:
    """A .gitmodules naming the nested submodule as upstream does, with our manifest's URL for
    it (check-pins matches nested submodules to our upstreams by URL)."""
    return {".gitmodules": f'[submodule "{name}"]\n\tpath = {path}\n\turl = {url}\n'}


@dataclass
class Stack:
    root: Path
    pins: dict[str, str]

    def checkout(self, name: str) -> Path:
        return self.root / "3rdparty" / name


def _repo(path: Path, files: dict[str, str], gitlinks: dict[str, str]) -> str:
    path.mkdir(parents=True)
    run(["init", "-q", "-b", "main"], path)
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    run(["add", "-A"], path)
    for rel, sha in gitlinks.items():
        run(["update-index", "--add", "--cacheinfo", f"160000,{sha},{rel}"], path)
    run(["commit", "-q", "-m", f"{path.name} pin"], path)
    return run(["rev-parse", "HEAD"], path)


def make_stack(tmp: Path, *, bridge_standin: bool = False, with_rl: bool = True) -> Stack:
    """Upstreams under `tmp/upstreams`, the superproject at `tmp/super` with each checked out
    (a plain clone: nested submodules uninitialised, i.e. empty directories).

    `bridge_standin`: Bridge is laid out like a wheel stand-in (only `src/`, no pyproject.toml,
    no .gitmodules, `patchtool.standin` set), as apply makes it where no clone is reachable.
    """
    ups = tmp / "upstreams"
    pins = {LM: _repo(ups / LM, LM_FILES, {})}
    if bridge_standin:
        files = {k: v for k, v in BRIDGE_FILES.items() if k.startswith("src/")}
        pins[BRIDGE] = _repo(ups / BRIDGE, files, {})
    else:
        files = {**BRIDGE_FILES, **_gitmodules(LM_IN_BRIDGE, LM_IN_BRIDGE, ups / LM)}
        pins[BRIDGE] = _repo(ups / BRIDGE, files, {LM_IN_BRIDGE: pins[LM]})
    files = {**RL_FILES, **_gitmodules("3rdparty/Megatron-Bridge", BRIDGE_IN_RL, ups / BRIDGE)}
    pins[RL] = _repo(ups / RL, files, {BRIDGE_IN_RL: pins[BRIDGE]})
    root = tmp / "super"
    root.mkdir()
    run(["init", "-q", "-b", "main"], root)
    manifest = []
    dists = {LM: "megatron-core", BRIDGE: "megatron-bridge", RL: "nemo-rl"}
    for name, dist in dists.items():
        manifest += [f"[{name}]", f'path = "3rdparty/{name}"', f'url = "{ups / name}"']
        manifest += ['tag = ""', f'commit = "{pins[name]}"', f'distribution = "{dist}"', ""]
        (root / "patches" / name).mkdir(parents=True)
        (root / "patches" / name / "series").write_text("")
        if name == RL and not with_rl:
            continue
        checkout = root / "3rdparty" / name
        run(["clone", "-q", "--no-checkout", str(ups / name), str(checkout)], root)
        run(["checkout", "-q", "--detach", pins[name]], checkout)
    (root / "patches" / "upstreams.toml").write_text("\n".join(manifest))
    (root / ".gitmodules").write_text(
        "".join(
            f'[submodule "3rdparty/{n}"]\n\tpath = 3rdparty/{n}\n\turl = {ups / n}\n' for n in dists
        )
    )
    if bridge_standin:
        run(["config", "patchtool.standin", STANDIN_SPEC], root / "3rdparty" / BRIDGE)
    for name, sha in pins.items():
        run(["update-index", "--add", "--cacheinfo", f"160000,{sha},3rdparty/{name}"], root)
    run(["add", "patches", ".gitmodules"], root)
    run(["commit", "-q", "-m", "superproject"], root)
    return Stack(root, pins)
