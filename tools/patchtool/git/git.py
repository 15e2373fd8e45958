"""The one git runner: every git call of the tooling goes through this module.

Every call gets the pinned output config (`PINNED_CONFIG`, one `-c` loop in `command()`), the
C locale and no prompts (`git_env()`). Variants: `git()` text, `git_bytes()` bytes, `git_text()`
stripped text, `git_ok()` exit status, `run()` the whole finished process, `git_timeout()`
network calls that may hang; `rev()` resolves a name (`rev-parse -q --verify`), `patch_id()`
fingerprints a patch, `format_patch()` is the one producer of patch files (byte-stable).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from ..errors import GitError, PatchToolError

# Settings that change what git prints are pinned on every call, so output (format-patch
# mboxes above all) is byte-identical whatever the user's or machine's git config says.
PINNED_CONFIG: tuple[str, ...] = (
    "core.abbrev=12",
    "core.quotePath=true",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "diff.relative=false",
    "diff.renames=true",
    "diff.algorithm=myers",
    "diff.context=3",
    "diff.interHunkContext=0",
    "diff.suppressBlankEmpty=false",
    "format.signature=",
    "format.signOff=false",
    "format.coverLetter=false",
    "format.numbered=false",
    "format.thread=false",
    "format.headers=",
    "format.encodeEmailHeaders=true",
    "format.useAutoBase=false",
    # A user's format.from / notes / global attributes (diff drivers change hunk headers)
    # would otherwise leak into exported mboxes (tests/tools/commands/test_export.py, hostile config).
    "format.from=false",
    "format.forceInBodyFrom=false",
    "format.notes=false",
    "core.attributesFile=/dev/null",
    "am.threeWay=false",
    "am.keepcr=false",
    "apply.whitespace=nowarn",
    "commit.gpgSign=false",
    "i18n.commitEncoding=UTF-8",
    "i18n.logOutputEncoding=UTF-8",
)

# The one format-patch invocation every patch file is produced by (DESIGN.md conventions).
FORMAT_PATCH_ARGS: tuple[str, ...] = (
    "format-patch",
    "--stdout",
    "--full-index",
    "--no-signature",
    "--zero-commit",
    "--no-stat",
    "--no-numbered",
    "--keep-subject",
    "--find-renames=50%",
    "--no-attach",
    "--no-cover-letter",
    "--no-add-header",
    "-O/dev/null",
)

# Environment that makes git independent of the caller's global/system config and locale.
_BASE_ENV = {
    "LC_ALL": "C",
    "LANG": "C",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
}


# Config for this process's git calls only (an offline mirror's `url.<dir>.insteadOf`,
# source/mirror.py): passed as GIT_CONFIG_KEY_n/VALUE_n after any the caller already has.
_SESSION_CONFIG: list[tuple[str, str]] = []


def set_session_config(pairs: list[tuple[str, str]]) -> None:
    """Give every later git call of this process these config pairs (never written anywhere)."""
    _SESSION_CONFIG[:] = pairs


def session_config_env(base: dict[str, str]) -> dict[str, str]:
    """`GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n` for the session config, appended to `base`'s own."""
    if not _SESSION_CONFIG:
        return {}
    start = int(base.get("GIT_CONFIG_COUNT", "0") or "0")
    env = {"GIT_CONFIG_COUNT": str(start + len(_SESSION_CONFIG))}
    for offset, (key, value) in enumerate(_SESSION_CONFIG):
        env[f"GIT_CONFIG_KEY_{start + offset}"] = key
        env[f"GIT_CONFIG_VALUE_{start + offset}"] = value
    return env


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(_BASE_ENV)
    env.update(session_config_env(env))
    if extra:
        env.update(extra)
    return env


def command(args: list[str]) -> list[str]:
    """`git -c <pinned>... <args>`: the one place the pinned config is put on a command line."""
    cmd = ["git"]
    for item in PINNED_CONFIG:
        cmd += ["-c", item]
    return [*cmd, *args]


def run(
    args: list[str],
    cwd: str | Path,
    *,
    input: bytes | str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """The finished process of `git <args>` (pinned config, C locale), whatever its exit code.

    For calls whose stderr matters even on success (`git apply -v` reports offsets there).
    """
    data = input.encode() if isinstance(input, str) else input
    return subprocess.run(
        command(args), cwd=str(cwd), input=data, capture_output=True, env=git_env(env), check=False
    )


def git_bytes(
    args: list[str],
    cwd: str | Path,
    *,
    input: bytes | str | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> bytes:
    """Stdout of `git <args>` as bytes; raise GitError on failure unless `check=False`."""
    proc = run(args, cwd, input=input, env=env)
    if check and proc.returncode != 0:
        raise GitError(args, str(cwd), proc.returncode, proc.stderr.decode(errors="replace"))
    return proc.stdout


def git(
    args: list[str],
    cwd: str | Path,
    *,
    input: bytes | str | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> str:
    """Stdout of `git <args>` as text (undecodable bytes kept as surrogates), not stripped."""
    out = git_bytes(args, cwd, input=input, env=env, check=check)
    return out.decode("utf-8", errors="surrogateescape")


def git_text(
    args: list[str],
    cwd: str | Path,
    *,
    input: bytes | str | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> str:
    """`git()` returning stripped text."""
    return git(args, cwd, input=input, env=env, check=check).strip()


def git_ok(args: list[str], cwd: str | Path, env: dict[str, str] | None = None) -> bool:
    """True if `git <args>` exits 0 (for questions such as `cat-file -e`)."""
    return run(args, cwd, env=env).returncode == 0


def git_timeout(args: list[str], cwd: str | Path, timeout: float) -> tuple[int | None, str]:
    """(exit code, last stderr line) of a network git call; exit code None if it timed out.

    On timeout the whole process group is killed (clone and fetch run as git's children,
    which would otherwise go on writing after we gave up) and waited for.
    """
    with subprocess.Popen(
        command(args),
        cwd=str(cwd),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=git_env(),
        start_new_session=True,
    ) as proc:
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return None, ""
    lines = stderr.decode(errors="replace").strip().splitlines()
    return proc.returncode, lines[-1] if lines else ""


def rev(repo: str | Path, name: str) -> str:
    """`name` resolved (`rev-parse -q --verify`), "" when it does not exist."""
    return git_text(["rev-parse", "-q", "--verify", name], repo, check=False)


def patch_ids(repo: str | Path, stream: bytes) -> list[tuple[str, str]]:
    """(patch-id, commit) of each patch in `stream` (mboxes or `git log -p`), `--stable`."""
    out = git_text(["patch-id", "--stable"], repo, input=stream)
    pairs = (line.split() for line in out.splitlines() if line.strip())
    return [(pid, sha) for pid, sha, *_ in pairs]


def patch_id(repo: str | Path, mbox: bytes) -> str:
    """`git patch-id --stable` of one patch ("" for a patch without a diff)."""
    ids = patch_ids(repo, mbox)
    return ids[0][0] if ids else ""


def format_patch(repo: str | Path, rev_range: str) -> bytes:
    """The mbox of `rev_range` exactly as patch files store it."""
    return git_bytes([*FORMAT_PATCH_ARGS, rev_range], repo)


def branch_commits(repo: Path, base: str, tip: str) -> list[str]:
    """Commits base..tip oldest first; refuse merges (a patch series is linear)."""
    if git_text(["rev-list", "--merges", f"{base}..{tip}"], repo):
        raise PatchToolError(f"{repo}: {base[:12]}..{tip} has merge commits; linearise it first")
    out = git_text(["rev-list", "--reverse", f"{base}..{tip}"], repo)
    return [x for x in out.splitlines() if x]


def export_commits(repo: Path, commits: list[str]) -> list[bytes]:
    return [format_patch(repo, f"{sha}^!") for sha in commits]
