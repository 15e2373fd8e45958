"""source/nested_wiring.py on copies of the real patched checkouts (where NeMo-RL's source is here).

A temporary superproject holds `clone --shared`-like copies of our 3rdparty checkouts at their
current (patched) HEADs and our manifest; the real 3rdparty is only read. After wiring, the
paths NeMo-RL's own pyproject (and Bridge's, or NeMo-RL's uv.lock where Bridge is a wheel
stand-in) name, read with tomllib, must land on those checkouts, and an editable `--no-deps`
install from them into a scratch venv must import from our trees. Building megatron-core
compiles its C++ helpers and importing it loads torch: ~1-2 min on 2 cores, hence `slow`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from tests.tools.repos import run
from tools.patchtool.model.manifest import MANIFEST_PATH, load_manifest
from tools.patchtool.source.nested_wiring import wire_host
from tools.patchtool.source.partial import recorded_absent_paths

REPO_ROOT = Path(__file__).resolve().parents[3]
REAL = {
    name: REPO_ROOT / "3rdparty" / name for name in ("Megatron-LM", "Megatron-Bridge", "NeMo-RL")
}

pytestmark = [
    pytest.mark.nemo_rl,
    pytest.mark.skipif(
        not (REAL["NeMo-RL"] / "pyproject.toml").is_file(),
        reason="NeMo-RL's source is absent (3rdparty/NeMo-RL): run tools/apply_patches.sh with "
        "its clone or an offline mirror (PATCHTOOL_MIRROR_DIR) to test the wiring on it",
    ),
    pytest.mark.skipif(
        not all((p / ".git").exists() for p in REAL.values()),
        reason="needs all three checkouts in 3rdparty/ (tools/apply_patches.sh)",
    ),
]


def _head(path: Path) -> str:
    return run(["rev-parse", "HEAD"], path)


def _git_path(repo: Path, name: str) -> Path:
    path = Path(run(["rev-parse", "--git-path", name], repo))
    return path if path.is_absolute() else repo / path


def _shared_copy(real: Path, copy: Path, root: Path) -> None:
    """What `git clone --shared` gives (objects borrowed through an alternate, HEAD checked
    out), made by hand: a clone goes through upload-pack for a shallow source, which refuses a
    partial one (the exact Bridge pin from the shared snapshot lacks 8 GIF blobs, left out of
    its checkout and recorded in `patchtool.absentPaths`)."""
    run(["init", "-q", str(copy)], root)
    (copy / ".git" / "objects" / "info" / "alternates").write_text(
        f"{_git_path(real, 'objects')}\n"
    )
    if _git_path(real, "shallow").is_file():
        shutil.copy(_git_path(real, "shallow"), copy / ".git" / "shallow")
    absent = recorded_absent_paths(real)
    if absent:  # the absent paths stay out of the working tree, as in the real checkout
        sparse = copy / ".git" / "info" / "sparse-checkout"
        sparse.parent.mkdir(parents=True, exist_ok=True)
        sparse.write_text("/*\n" + "".join(f"!/{path}\n" for path in absent))
        run(["config", "core.sparseCheckout", "true"], copy)
    run(["checkout", "-q", "--detach", _head(real)], copy)
    if absent:
        run(["config", "--unset", "core.sparseCheckout"], copy)
        (copy / ".git" / "info" / "sparse-checkout").unlink()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A superproject of shared clones of our checkouts at their HEADs, wired."""
    root = tmp_path_factory.mktemp("real") / "super"
    (root / MANIFEST_PATH).parent.mkdir(parents=True)
    shutil.copy(REPO_ROOT / MANIFEST_PATH, root / MANIFEST_PATH)
    for name, real in REAL.items():
        copy = root / "3rdparty" / name
        _shared_copy(real, copy, root)
        spec = run(["config", "--get", "patchtool.standin"], real, check=False)
        if spec:
            run(["config", "patchtool.standin", spec], copy)
    manifest = load_manifest(root)
    for up in manifest.upstreams.values():
        wire_host(root, manifest, up)
    return root


def _uv_source(checkout: Path, package: str) -> Path | None:
    pyproject = checkout / "pyproject.toml"
    if not pyproject.is_file():
        return None
    return checkout / tomllib.loads(pyproject.read_text())["tool"]["uv"]["sources"][package]["path"]


def _bridge_path(stack: Path) -> Path:
    path = _uv_source(stack / "3rdparty" / "NeMo-RL", "megatron-bridge")
    assert path is not None
    return path


def _core_path(stack: Path) -> Path:
    """megatron-core's path as Bridge's pyproject names it; where Bridge is a wheel stand-in
    (no pyproject.toml), as NeMo-RL's uv.lock records it."""
    bridge = _bridge_path(stack)
    path = _uv_source(bridge, "megatron-core")
    if path is not None:
        return path
    rl = stack / "3rdparty" / "NeMo-RL"
    lock = tomllib.loads((rl / "uv.lock").read_text())
    [core] = [p for p in lock["package"] if p["name"] == "megatron-core"]
    return rl / core["source"]["editable"]


def test_nemo_rls_uv_sources_land_on_our_patched_heads(stack: Path) -> None:
    bridge, core = _bridge_path(stack), _core_path(stack)
    assert os.path.realpath(bridge) == os.path.realpath(stack / "3rdparty" / "Megatron-Bridge")
    assert os.path.realpath(core) == os.path.realpath(stack / "3rdparty" / "Megatron-LM")
    assert _head(bridge) == _head(REAL["Megatron-Bridge"])
    assert _head(core) == _head(REAL["Megatron-LM"])
    for name in ("NeMo-RL", "Megatron-Bridge"):
        assert run(["status", "--porcelain"], stack / "3rdparty" / name) == ""


def _scratch_venv(tmp: Path) -> Path:
    """A bare venv that also sees this environment's packages (torch), after its own: a plain
    path line, so this environment's own editable megatron-core finder is not loaded."""
    venv = tmp / "venv"
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    subprocess.run(["uv", "venv", "-q", "-p", py, str(venv)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "zz_project_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def _install(venv: Path, path: Path) -> None:
    python = str(venv / "bin" / "python")
    cmd = ["uv", "pip", "install", "-q", "--no-deps", "-p", python, "-e", str(path)]
    subprocess.run(cmd, check=True)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("uv") is None, reason="needs the uv binary")
def test_megatron_core_installs_and_imports_from_our_tree(stack: Path, tmp_path: Path) -> None:
    venv = _scratch_venv(tmp_path)
    _install(venv, _core_path(stack))
    probe = "import megatron.core; print(megatron.core.__file__)"
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    ours = stack / "3rdparty" / "Megatron-LM" / "megatron" / "core" / "__init__.py"
    assert os.path.realpath(out) == os.path.realpath(ours)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("uv") is None, reason="needs the uv binary")
def test_megatron_bridge_installs_from_our_tree(stack: Path, tmp_path: Path) -> None:
    bridge = _bridge_path(stack)
    if not (bridge / "pyproject.toml").is_file():
        pytest.skip(
            "our 3rdparty/Megatron-Bridge is a wheel-layout release stand-in without "
            "pyproject.toml: nothing can build megatron-bridge from it (a clone of the pin can); "
            "the install through NeMo-RL's path is tested on a clone-shaped Bridge in "
            "tests/tools/source/test_nested_wiring.py"
        )
    venv = _scratch_venv(tmp_path)
    _install(venv, bridge)
    # Importing megatron.bridge needs Transformer Engine; where it comes from is the question.
    probe = "import importlib.util as u; print(u.find_spec('megatron.bridge').origin)"
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    ours = stack / "3rdparty" / "Megatron-Bridge" / "src" / "megatron" / "bridge" / "__init__.py"
    assert os.path.realpath(out) == os.path.realpath(ours)
