"""Pack installed distributions from this project's venv into a tarball for the GPU machine.

The lent GPU machine is offline and its image lacks some of what the worker path imports
(NeMo-RL's math environment imports ray, hydra, datasets and math-verify; Bridge imports
omegaconf). Its own torch and transformers stay; these travel as the files uv installed here
(the versions uv.lock pins, built for this x86-64 Linux), without ray's cluster binaries,
dashboard and libraries (an in-process run never starts Ray; with them ray is 200 MB, over the
64 MiB a device call may carry).

    uv run python benchmarks/device/site_bundle.py OUT.tar.gz DIST [DIST ...]
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys
import tarfile
from pathlib import Path, PurePosixPath

# ray's parts an import of `ray` (and NeMo-RL's `@ray.remote` classes) does not need.
RAY_LEFT_OUT = (
    ("core", "src"),  # raylet and gcs_server binaries (73 MB); core/generated is imported
    ("jars",),
    ("dashboard",),
    ("rllib",),
    ("data",),
    ("serve",),
    ("tune",),
    ("train",),
    ("llm",),
)


def left_out(path: PurePosixPath) -> bool:
    """Files not worth carrying: bytecode caches and ray's unused parts."""
    if "__pycache__" in path.parts:
        return True
    return path.parts[0] == "ray" and any(
        path.parts[1 : 1 + len(prefix)] == prefix for prefix in RAY_LEFT_OUT
    )


def files_of(name: str) -> list[tuple[Path, str]]:
    """(absolute path, path inside site-packages) of every installed file of `name`."""
    dist = metadata.distribution(name)
    found: list[tuple[Path, str]] = []
    for entry in dist.files or []:
        relative = PurePosixPath(str(entry))
        if relative.parts[0] == ".." or left_out(relative):
            continue
        path = Path(str(dist.locate_file(entry)))
        if path.is_file():
            found.append((path, str(relative)))
    return found


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    out, names = Path(argv[0]), argv[1:]
    try:
        chosen = [(name, files_of(name)) for name in names]
    except metadata.PackageNotFoundError as err:
        print(
            f"site_bundle.py: {err.args[0]} is not installed in this venv (uv sync)",
            file=sys.stderr,
        )
        return 1
    with tarfile.open(out, "w:gz") as tar:
        for name, files in chosen:
            for path, arcname in sorted(files, key=lambda item: item[1]):
                tar.add(path, arcname=arcname, recursive=False)
            print(f"site_bundle.py: {name} {metadata.version(name)}: {len(files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
