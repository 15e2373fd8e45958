"""Temp superprojects with real git "upstream" repos, for driving tools/patchtool directly."""

from __future__ import annotations

import io
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

from tools.patchtool.git.git import format_patch
from tools.patchtool.model.manifest import Standin

REPO_ROOT = Path(__file__).resolve().parents[2]

UNREACHABLE = "file:///nonexistent/upstream.git"
TRAILERS = (
    "Upstream-Status: pending\nOrigin: mcore-rl-stack tests\nTest: tests/test_trip.py::test_trip\n"
)


def run(cwd: Path, *args: str, input: bytes | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr.decode()}")
    return proc.stdout.decode().strip()


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def lines(n: int, tag: str = "line") -> str:
    return "".join(f"{tag} {i}\n" for i in range(1, n + 1))


class Sandbox:
    """One temp dir holding upstream repos and a superproject that pins them."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.root = tmp / "super"
        self.upstreams: dict[str, tuple[str, str, Standin | None, str]] = {}

    def upstream(self, name: str, files: dict[str, str]) -> tuple[Path, str]:
        """A bare-ish upstream repo with one commit of `files`; returns (path, commit)."""
        repo = self.tmp / "upstreams" / name
        repo.mkdir(parents=True)
        run(repo, "init", "-q", "-b", "main")
        write(repo, files)
        run(repo, "add", "-A")
        run(repo, "commit", "-q", "-m", f"{name} initial")
        return repo, run(repo, "rev-parse", "HEAD")

    def make_patch(
        self, repo: Path, base: str, files: dict[str, str], subject: str, trailers: str = TRAILERS
    ) -> bytes:
        """format-patch mbox of one commit changing `files` on top of `base` in `repo`."""
        work = self.tmp / "dev" / repo.name
        if not work.exists():
            run(self.tmp, "clone", "-q", str(repo), str(work))
        run(work, "checkout", "-q", "--detach", base)
        write(work, files)
        run(work, "add", "-A")
        run(work, "commit", "-q", "-m", f"{subject}\n\nWhy: a test.\n\n{trailers}")
        return format_patch(work, "HEAD~1..HEAD")

    def add(
        self, name: str, url: str, commit: str, standin: Standin | None = None, clone: bool = True
    ) -> None:
        """Register upstream `name` in the superproject (cloned as a submodule if `clone`)."""
        self.upstreams[name] = (url, commit, standin, "")
        if not self.root.exists():
            self.root.mkdir()
            run(self.root, "init", "-q", "-b", "main")
            write(self.root, {"tests/test_trip.py": "def test_trip():\n    pass\n"})
        path = f"3rdparty/{name}"
        if clone:
            run(self.root, "submodule", "add", "-q", url, path)
            run(self.root / path, "checkout", "-q", "--detach", commit)
            run(self.root, "add", path)
        else:
            run(self.root, "config", "-f", ".gitmodules", f"submodule.{path}.path", path)
            run(self.root, "config", "-f", ".gitmodules", f"submodule.{path}.url", url)
            run(self.root, "update-index", "--add", "--cacheinfo", f"160000,{commit},{path}")
            run(self.root, "add", ".gitmodules")
        (self.root / "patches" / name).mkdir(parents=True, exist_ok=True)
        self.set_series(name, {})
        self.write_manifest()

    def write_manifest(self) -> None:
        out = []
        for name, (url, commit, standin, _) in self.upstreams.items():
            out += [f"[{name}]", f'path = "3rdparty/{name}"', f'url = "{url}"', 'tag = "v1"']
            out += [f'commit = "{commit}"', f'distribution = "{name.lower()}"', ""]
            if standin:
                out += [
                    f"[{name}.standin]",
                    f'kind = "{standin.kind}"',
                    f'package = "{standin.package}"',
                ]
                out += [
                    f'version = "{standin.version}"',
                    "proxy = false",
                    "",
                    f"[{name}.standin.paths]",
                ]
                out += [f'"{k}" = "{v}"' for k, v in standin.paths.items()] + [""]
        write(self.root, {"patches/upstreams.toml": "\n".join(out)})

    def set_series(self, name: str, patches: dict[str, bytes]) -> None:
        """Write `patches/<name>/<file>` for each patch and a series listing them in order."""
        folder = self.root / "patches" / name
        for old in folder.glob("*.patch"):
            old.unlink()
        for file, data in patches.items():
            (folder / file).write_bytes(data)
        (folder / "series").write_text("".join(f"{file}\n" for file in patches))

    def preload_for_upstream_suites(self) -> None:
        """What the project's verify preloads for upstream-suite states, here too: every such
        state loads the CPU plugin (`upstream_pytest.cpu`, which imports torch), so the
        fork server imports torch once instead of each state for ~3 s of CPU."""
        write(
            self.root,
            {
                "pyproject.toml": '[tool.patchtool.verify]\npreload = ["torch", "pytest", '
                '"pytest_timeout"]\n'
            },
        )

    def commit(self) -> None:
        run(self.root, "add", "patches", "tests")
        run(self.root, "commit", "-q", "-m", "superproject")


def sdist_downloader(
    files: dict[str, str], top: str = "pkg-1.0"
) -> Callable[[Standin, Path], Path]:
    """A Downloader that writes a local sdist holding `files` under `top/` (no network)."""

    def download(standin: Standin, cache: Path) -> Path:
        archive = cache / f"{top}.tar.gz"
        with tarfile.open(archive, "w:gz") as tf:
            for rel, text in sorted(files.items()):
                data = text.encode()
                info = tarfile.TarInfo(f"{top}/{rel}")
                info.size, info.mode = len(data), 0o644
                tf.addfile(info, io.BytesIO(data))
        return archive

    return download
