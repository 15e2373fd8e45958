"""upstream-dists/: Megatron-Bridge and NeMo-RL are installed distributions of the environment,
editable from the patched checkouts, named with the upstream's version and the pin."""

from __future__ import annotations

import importlib.metadata
import os
import runpy
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DISTS = {  # distribution: (upstream, its package, the package's directory in the checkout)
    "megatron-bridge": ("Megatron-Bridge", "megatron.bridge", "src/megatron/bridge"),
    "nemo-rl": ("NeMo-RL", "nemo_rl", "nemo_rl"),
}


def _pin(upstream: str) -> str:
    with (REPO / "patches" / "upstreams.toml").open("rb") as manifest:
        return tomllib.load(manifest)[upstream]["commit"]


@pytest.mark.parametrize("dist", sorted(DISTS))
def test_installed_from_the_checkout_with_version_and_pin(
    dist: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream, _package, package_dir = DISTS[dist]
    checkout = REPO / "3rdparty" / upstream / package_dir
    if not (checkout / "__init__.py").is_file():
        pytest.skip(f"{checkout} is absent (run tools/apply_patches.sh, then uv sync)")
    monkeypatch.setenv("NO_VCS_VERSION", "1")  # the upstream's own switch: no git suffix
    version = runpy.run_path(str(checkout / "package_info.py"))["__version__"]
    expected = f"{version}+g{_pin(upstream)[:8]}"
    assert importlib.metadata.version(dist) == expected


def test_a_script_anywhere_imports_all_three(tmp_path: Path) -> None:
    """Not through this project's code or sys.path: a plain interpreter of the environment, in
    a directory of its own, with no PYTHONPATH."""
    # Before `import nemo_rl`: NeMo-RL's own __init__ appends the Megatron-LM root (through its
    # nested Megatron-Bridge-workspace) to sys.path, whose tests/ and tools/ then resolve.
    code = (
        "import megatron.core, megatron.bridge, importlib.util as u\n"
        "shadows = (u.find_spec('tests'), u.find_spec('tools'))\n"
        "import nemo_rl\n"
        "print(megatron.core.__file__); print(megatron.bridge.__file__); print(nemo_rl.__file__)\n"
        "print(*shadows)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    core, bridge, nemo_rl, shadows = out.stdout.strip().splitlines()[-4:]
    assert Path(core).is_relative_to((REPO / "3rdparty" / "Megatron-LM").resolve())
    assert Path(bridge).is_relative_to((REPO / "3rdparty" / "Megatron-Bridge").resolve())
    assert Path(nemo_rl).is_relative_to((REPO / "3rdparty" / "NeMo-RL").resolve())
    assert shadows == "None None"  # the shims map their package only, never a checkout root


@pytest.mark.parametrize("dist", sorted(DISTS))
def test_shim_versions_an_absent_checkout_and_a_present_one(tmp_path: Path, dist: str) -> None:
    """The shim on a copy of the repository's layout: no checkout -> `0+absent` (installs
    empty); a checkout -> the upstream's version and the pin."""
    upstream, _package, package_dir = DISTS[dist]
    shutil.copytree(REPO / "upstream-dists", tmp_path / "upstream-dists")
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "upstreams.toml").write_text(
        f'[{upstream}]\ncommit = "0123456789abcdef0123456789abcdef01234567"\n'
    )
    shim = tmp_path / "upstream-dists" / dist

    def version() -> str:
        out = subprocess.run(
            [sys.executable, "setup.py", "--version"], cwd=shim, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.strip().splitlines()[-1]

    assert version() == "0+absent"
    package = tmp_path / "3rdparty" / upstream / package_dir
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "package_info.py").write_text('__version__ = "1.2.3"\n')
    assert version() == "1.2.3+g01234567"
