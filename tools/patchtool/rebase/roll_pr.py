"""Open the pull request of a roll: push the roll commit to a branch, then `gh pr create`.

What the nightly workflow (.github/workflows/roll.yml) calls through `roll --open-pr`. Every
command is an argument list (no shell); a failure says what was done and what is left.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import PatchToolError
from ..git.git import git_text, run
from ..model.manifest import short
from .roll import TOP, RollPlan, commit_message


def roll_branch(roll: RollPlan) -> str:
    """One branch per target: a re-run for the same NeMo-RL commit updates its PR."""
    top = next(p for p in roll.planned if p.move.upstream.name == TOP)
    return f"roll/nemo-rl-{short(top.move.commit)}"


def pr_body(roll: RollPlan, page: str) -> str:
    lines = commit_message(roll).splitlines()
    body = "\n".join(lines[2:]).strip()
    return f"{body}\n\n{page}" if page else body + "\n"


def open_roll_pr(
    root: Path,
    roll: RollPlan,
    *,
    page: str = "",
    remote: str = "origin",
    base: str = "main",
    gh: str | None = None,
) -> str:
    """Push HEAD (the roll commit) to `roll/nemo-rl-<sha>` on `remote`, open the PR: its URL."""
    branch = roll_branch(roll)
    push = ["push", "--force", remote, f"HEAD:refs/heads/{branch}"]
    proc = run(push, root)
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()
        raise PatchToolError(
            f"git push to {remote} failed ({tail[-1] if tail else proc.returncode}); the roll "
            f"commit is on HEAD: push it with git {shlex.join(push)}"
        )
    title = commit_message(roll).splitlines()[0]
    gh_path = gh if gh is not None else shutil.which("gh")
    with tempfile.TemporaryDirectory(prefix="patches-roll-pr-") as tmp:
        body = Path(tmp) / "body.md"
        body.write_text(pr_body(roll, page), encoding="utf-8")
        cmd = ["pr", "create", "--base", base, "--head", branch, "--title", title]
        cmd += ["--body-file", str(body)]
        if not gh_path:
            raise PatchToolError(
                f"gh not found; pushed {branch} to {remote}; open the PR by hand: "
                f"gh {shlex.join(cmd[:-2])}"
            )
        proc_gh = subprocess.run([gh_path, *cmd], cwd=root, capture_output=True, check=False)
    urls = re.findall(r"https?://\S+", proc_gh.stdout.decode(errors="replace"))
    if proc_gh.returncode != 0 or not urls:
        tail = proc_gh.stderr.decode(errors="replace").strip().splitlines()
        raise PatchToolError(
            f"gh pr create failed ({tail[-1] if tail else f'exit {proc_gh.returncode}'}); "
            f"pushed {branch} ({git_text(['rev-parse', 'HEAD'], root)[:12]}) to {remote}; "
            f"left to do: gh {shlex.join(cmd[:-2])}"
        )
    return urls[-1]
