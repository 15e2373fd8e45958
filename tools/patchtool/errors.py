"""Exceptions the CLI turns into one clear line, and the exit codes every command uses."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The process exit codes of `tools/patches`, the same meaning in every command.

    OK: done, everything checked passed. FAILED: an error, a finding, a lint error or an
    incoherence (also every `error:` line). CONFLICT: `rebase`/`pin` stopped on a conflicting
    patch; nothing outside the scratch directory changed. NOT_VERIFIED: nothing failed, but
    something could not be verified, checked or known here (a missing upstream, a proxy, a check
    config absent on a stand-in, an unknown pin relation); `--allow-missing` turns it into OK
    where a command offers it. INTERRUPTED: Ctrl-C.
    """

    OK = 0
    FAILED = 1
    CONFLICT = 2
    NOT_VERIFIED = 3
    INTERRUPTED = 130


class PatchToolError(Exception):
    """An error the user can act on; the message says what failed and what to do next."""

    exit_code = ExitCode.FAILED


class GitError(PatchToolError):
    """A git command failed; carries the command and its stderr."""

    def __init__(self, args: list[str], cwd: str, returncode: int, stderr: str) -> None:
        self.args_list = args
        self.cwd = cwd
        self.returncode = returncode
        self.stderr = stderr
        detail = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {returncode}"
        super().__init__(f"git {' '.join(args)} (in {cwd}) failed: {detail}")
