"""How far a series can be trusted on a proxy: a release standing in for a non-release pin.

Each patch's `--full-index` pre-image blobs are the pinned commit's files. Replaying the series
in a throw-away index on the proxy's tree (nothing else is touched) sorts every patch into:

- identical:    every pre-image blob is the proxy's file -> "verified on proxy, pre-image
                identical to pin" (the tested code is the pinned code);
- differs:      some pre-image differs, but `git apply` places every hunk by exact context
                (offsets allowed, never fuzz) -> "proxy, pre-image differs from pin: <files>";
- not-verified: the hunks do not apply -> "not verified here". Such a patch is NOT applied
                on the proxy; the rest of the series is, in order, each on the state the
                previous applied patches left (a patch that needs a skipped one then usually
                fails too and is skipped as well). Nothing about it is claimed.

The result is a pure function of (proxy commit, series), so `apply`, `status` and `verify`
recompute it and always agree.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import GitError
from ..git.git import git, git_text
from ..model.manifest import Upstream
from ..model.series import Patch, SeriesEntry

IDENTICAL, DIFFERS, NOT_VERIFIED = "identical", "differs", "not-verified"
LABEL_IDENTICAL = "verified on proxy, pre-image identical to pin"
LABEL_DIFFERS = "proxy, pre-image differs from pin"
LABEL_NOT_VERIFIED = "not verified here"


@dataclass
class ProxyCheck:
    """The verdict for one patch on the proxy; `files` are the differing pre-images."""

    patch: str
    state: str
    files: list[str] = field(default_factory=list)
    reason: str = ""

    @property
    def applies(self) -> bool:
        return self.state != NOT_VERIFIED

    @property
    def label(self) -> str:
        if self.state == IDENTICAL:
            return LABEL_IDENTICAL
        if self.state == DIFFERS:
            return f"{LABEL_DIFFERS}: {', '.join(self.files)}"
        return f"{LABEL_NOT_VERIFIED} (proxy: {self.reason})"

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "label": self.label}


def proxy_name(up: Upstream) -> str:
    """`megatron-core 0.19.2 (proxy for 14346b65a2d0)`: how every proxy line names its source."""
    assert up.standin is not None
    return f"{up.standin.package} {up.standin.version} (proxy for {up.commit[:12]})"


def is_proxy(up: Upstream) -> bool:
    return up.standin is not None and up.standin.proxy


def _index_blobs(repo: Path, env: dict[str, str], paths: list[str]) -> dict[str, str]:
    out = git_text(["ls-files", "-s", "--", *paths], repo, env=env) if paths else ""
    blobs: dict[str, str] = {}
    for row in out.splitlines():
        meta, path = row.split("\t", 1)
        blobs[path] = meta.split()[1]
    return blobs


def _first_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.startswith(("error:", "fatal:"))]
    return lines[0].removeprefix("error: ") if lines else "git apply failed"


def check_series(
    repo: Path, proxy_commit: str, series: list[tuple[SeriesEntry, Patch]]
) -> list[ProxyCheck]:
    """Classify each patch on the proxy tree `proxy_commit` (see the module docstring)."""
    checks: list[ProxyCheck] = []
    with tempfile.TemporaryDirectory(prefix="patchtool-proxy-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(["read-tree", proxy_commit], repo, env=env)
        for entry, patch in series:
            paths = sorted({d.old_path for d in patch.files if d.old_path and not d.is_new})
            have = _index_blobs(repo, env, paths)
            differs = sorted(
                d.old_path
                for d in patch.files
                if d.old_path
                and not d.is_new
                and d.old_blob
                and not have.get(d.old_path, "").startswith(d.old_blob)
            )
            data = patch.path.read_bytes()
            try:
                git(["apply", "--cached", "--check", "-"], repo, input=data, env=env)
            except GitError as exc:
                checks.append(
                    ProxyCheck(entry.name, NOT_VERIFIED, differs, _first_error(exc.stderr))
                )
                continue
            git(["apply", "--cached", "-"], repo, input=data, env=env)
            checks.append(ProxyCheck(entry.name, DIFFERS if differs else IDENTICAL, differs))
    return checks
