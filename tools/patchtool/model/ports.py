"""Ports: a patch carried onto the upstream's `main`, kept beside its pin version.

A PR goes to the upstream's `main`, not to our pin. Where a patch does not apply cleanly
there, `patches/<Upstream>/main/<name>.patch` holds the same commit (the same message,
author and date: only the diff differs) resolved onto `main`; `open-pr` with base `main`
opens it instead of the pin patch. The pin patch stays what `apply` uses. Why a file and not
a branch: it is reviewed, linted and exported like every other patch.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import PatchToolError
from .series import Patch, parse_patch

PORT_DIR = "main"
PORT_BASE = "main"  # the upstream branch a port is resolved onto


def port_path(patch_file: Path) -> Path:
    """Where the port of `patches/<Upstream>/<name>.patch` lives (it may not exist)."""
    return patch_file.parent / PORT_DIR / patch_file.name


def pin_path(port_file: Path) -> Path:
    """The pin patch a port belongs to."""
    return port_file.parent.parent / port_file.name


def find_port(patch_file: Path) -> Path | None:
    """The patch's port onto `main`, or None when the pin patch itself opens there."""
    port = port_path(patch_file)
    return port if port.is_file() else None


def message_of(data: bytes) -> bytes:
    """The mbox up to its first diff: From line, author, date, subject, body and trailers."""
    head, sep, _ = data.partition(b"\ndiff --git ")
    return head if sep else data


def message_differences(pin: Patch, port: Patch) -> list[str]:
    """What of the commit a port changes besides its diff (it must change nothing)."""
    problems = []
    if port.subject != pin.subject:
        problems.append(f"subject {port.subject!r} is not the pin patch's {pin.subject!r}")
    if (port.author_name, port.author_email, port.date) != (
        pin.author_name,
        pin.author_email,
        pin.date,
    ):
        problems.append("author or date differs from the pin patch's")
    pin_trailers = [(t.key, t.value) for t in pin.trailers]
    port_trailers = [(t.key, t.value) for t in port.trailers]
    if port_trailers != pin_trailers:
        keys = sorted({k for k, _ in set(pin_trailers) ^ set(port_trailers)})
        problems.append(f"trailers differ from the pin patch's ({', '.join(keys) or 'order'})")
    if not problems and message_of(port.path.read_bytes()) != message_of(pin.path.read_bytes()):
        problems.append("commit message differs from the pin patch's")
    return problems


def port_problems(series_dir: Path, series_names: set[str]) -> list[tuple[Path, int, str]]:
    """(port file, line, why) for every port that is an orphan or says other than its pin
    patch: the port must be the same fix, so everything but its diff is the pin patch's."""
    problems: list[tuple[Path, int, str]] = []
    for port_file in sorted((series_dir / PORT_DIR).glob("*.patch")):
        pin_file = pin_path(port_file)
        if port_file.name not in series_names or not pin_file.is_file():
            why = (
                f"orphan port: {port_file.name} is not in the series; remove it "
                "(a retired patch needs no port)"
            )
            problems.append((port_file, 1, why))
            continue
        port = parse_patch(port_file)
        pin = parse_patch(pin_file)
        line = port.subject_line or 1
        for why in message_differences(pin, port):
            problems.append(
                (
                    port_file,
                    line,
                    f"port of {pin_file.name}: {why}; regenerate it: tools/patches port "
                    f"{pin_file.parent.name}/{pin_file.name}",
                )
            )
    return problems


def pr_port(patch_file: Path, base: str, onto: str) -> Path | None:
    """The port `open-pr` applies instead of the pin patch: the PR targets `main` and starts
    there (no `--onto`, which names another start, e.g. the pin)."""
    if base != PORT_BASE or onto:
        return None
    return find_port(patch_file)


def refuse_port(path: Path, upstream: str) -> None:
    """Commands take the pin patch; its port follows it (open-pr picks it, set-status
    rewrites both)."""
    if path.parent.name == PORT_DIR and path.parent.parent.name == upstream:
        raise PatchToolError(
            f"{path.name} under {upstream}/{PORT_DIR}/ is a port: give the pin patch "
            f"patches/{upstream}/{path.name} (open-pr uses its port for base {PORT_BASE})"
        )
