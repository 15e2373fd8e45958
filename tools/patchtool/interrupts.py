"""Signals that end a command: SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt.

Why one place: a process inherits its parent's signal dispositions, and a non-interactive
shell starts background jobs (`cmd &`, CI steps, `nohup`) with SIGINT *ignored*; Python then
leaves it ignored, so a Ctrl-C or `kill -INT` sent to such a run did nothing and `verify`
ran on until its states finished. Every command installs these handlers first, so an
interrupt always unwinds through the commands' cleanup (checkouts restored, children killed,
scratch trees removed) and exits 130.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def interrupt_on_signals() -> dict[signal.Signals, Handler]:
    """Make each of `SIGNALS` raise KeyboardInterrupt in the main thread; the previous
    handlers (nothing is changed off the main thread, where Python cannot set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, _interrupt) for sig in SIGNALS}


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """`interrupt_on_signals()` for the duration of a block (library callers: tests, rebase's
    tripwire hook), the previous handlers restored after it."""
    saved = interrupt_on_signals()
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
