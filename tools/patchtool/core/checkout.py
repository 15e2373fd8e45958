"""The state patchtool keeps in each upstream checkout, in one place.

- branch `patched` (`BRANCH_REF`): the applied series; HEAD is a symbolic ref to it after apply.
- `PIN_REF`: the commit patches go on (the manifest commit, or the stand-in commit).
- `APPLIED_REF` + config `DIGEST_KEY` (`series_digest`): what apply last made; a re-run is a
  no-op when digest, HEAD, branch and a clean tree match.
- config `STANDIN_KEY = <package>==<version>`: the checkout is a release stand-in, not a clone.

Every command reads these names from here; none spells a ref or key out itself.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .git import git, git_ok
from .manifest import Upstream
from .series import Series

BRANCH = "patched"
BRANCH_REF = f"refs/heads/{BRANCH}"
APPLIED_REF = "refs/patchtool/applied"
DIGEST_KEY = "patchtool.digest"
PIN_REF = "refs/patchtool/pin"
STANDIN_KEY = "patchtool.standin"


def series_digest(up: Upstream, series_dir: Path, series: Series) -> str:
    """Digest of everything an applied state depends on: pin, stand-in spec, series bytes."""
    h = hashlib.sha256(f"{up.commit}\n{up.standin}\n".encode())
    for entry, _ in series:
        h.update(entry.name.encode() + b"\0" + (series_dir / entry.name).read_bytes() + b"\0")
    return h.hexdigest()


def dirty_files(repo: Path) -> list[str]:
    """Uncommitted changes (tracked and untracked, not ignored) as `XY path` lines."""
    out = git(["status", "--porcelain=v1", "--untracked-files=normal"], repo)
    assert isinstance(out, str)
    return [line for line in out.splitlines() if line.strip()]


def checkout_dir(root: Path, up: Upstream) -> Path:
    return root / up.path


def is_repo(path: Path) -> bool:
    """True if `path` itself is a git work tree (never the enclosing superproject)."""
    return (path / ".git").exists()


def has_commit(repo: Path, commit: str) -> bool:
    return git_ok(["cat-file", "-e", f"{commit}^{{commit}}"], repo)
