"""Exceptions the CLI turns into one clear line and a non-zero exit."""

from __future__ import annotations


class PatchToolError(Exception):
    """An error the user can act on; the message says what failed and what to do next."""

    exit_code = 1


class GitError(PatchToolError):
    """A git command failed; carries the command and its stderr."""

    def __init__(self, args: list[str], cwd: str, returncode: int, stderr: str) -> None:
        self.args_list = args
        self.cwd = cwd
        self.returncode = returncode
        self.stderr = stderr
        detail = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {returncode}"
        super().__init__(f"git {' '.join(args)} (in {cwd}) failed: {detail}")
