"""Install a patched upstream checkout under ``3rdparty/`` as an editable distribution.

Why: `uv sync` must make Megatron-Bridge and NeMo-RL importable packages of this environment
(scripts, notebooks, debuggers and type checkers see them; `uv pip list` names them), yet
neither checkout can be a path source as it stands. Their pyprojects declare ~30 (Bridge) and
~60 (NeMo-RL) requirements, many CUDA-only, NeMo-RL requires Python >= 3.13.14 and its
`[tool.uv.sources]` name workspace members uv refuses outside NeMo-RL's own workspace. So each
gets a small setuptools project here (as NeMo-RL gives Bridge and Megatron-LM its
`3rdparty/*-workspace` shims): its name, the upstream's own version, and its one package,
mapped to the checkout; its requirements are the dependency group of pyproject.toml that this
environment can install. setuptools' editable finder maps exactly that package (never the
checkout's `tests` or `tools`, which would shadow this project's), so an edit of the checkout
takes effect without a reinstall.

The version is the upstream's own ``package_info.__version__`` with the pinned commit as its
local label, `git describe` style (``0.6.0+g7ea279ab``: a label of digits alone would lose its
leading zeros): `importlib.metadata.version("nemo-rl")` names both. Where the
checkout is absent (no `tools/apply_patches.sh` yet, or `--allow-missing` without its source)
the distribution installs empty, versioned ``0+absent``, and the code that needs it says so in
one line (`mcore_grpo.worker.bridge_source`, `mcore_grpo.nemo_rl_driver.source`).
"""

from __future__ import annotations

import os
import runpy
import tomllib
from pathlib import Path

from setuptools import find_packages, setup

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "patches" / "upstreams.toml"


def pinned_commit(upstream: str) -> str:
    """The commit `patches/upstreams.toml` pins for `upstream`."""
    with MANIFEST.open("rb") as manifest:
        return tomllib.load(manifest)[upstream]["commit"]


def upstream_version(package_dir: Path) -> str:
    """The upstream's ``package_info.__version__`` without its VCS suffix (its own switch)."""
    os.environ["NO_VCS_VERSION"] = "1"
    return str(runpy.run_path(str(package_dir / "package_info.py"))["__version__"])


def setup_upstream(here: Path, upstream: str, source_root: str, package: str) -> None:
    """`setup()` for `package` of `upstream`'s checkout (`source_root`: its import root)."""
    root = REPO / "3rdparty" / upstream / source_root
    package_dir = root / package.replace(".", "/")
    if not (package_dir / "__init__.py").is_file():
        setup(version="0+absent", packages=[])
        return
    version = f"{upstream_version(package_dir)}+g{pinned_commit(upstream)[:8]}"
    # From the package itself down: Bridge's `megatron` is a namespace it shares with
    # megatron-core, which find_packages would not enter.
    packages = [package, *(f"{package}.{sub}" for sub in find_packages(str(package_dir)))]
    dirs = {name: os.path.relpath(root / name.replace(".", "/"), here) for name in packages}
    setup(version=version, packages=packages, package_dir=dirs)
