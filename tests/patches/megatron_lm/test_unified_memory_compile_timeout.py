"""Tripwire for patches/Megatron-LM/unified-memory-compile-timeout-threads.patch.

`_compile_timeout` guards the UVM allocator's JIT compile with SIGALRM, which Python only
allows on the main thread; Ray actors compile off the main thread. Off the main thread the
guard must be skipped; on the main thread it must still time out.
"""

from __future__ import annotations

import threading
import time

import pytest


def test_compile_timeout_off_main_thread() -> None:
    from megatron.core.inference import unified_memory

    errors: list[BaseException] = []
    ran: list[bool] = []

    def worker() -> None:
        try:
            with unified_memory._compile_timeout(5):
                ran.append(True)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=worker, name="ray-actor-like")
    thread.start()
    thread.join(timeout=30)

    assert not thread.is_alive()
    assert errors == [], f"_compile_timeout failed off the main thread: {errors[0]!r}"
    assert ran == [True]


def test_compile_timeout_main_thread_still_raises() -> None:
    """Regression guard: the fix must not disable the timeout where signals work."""
    from megatron.core.inference import unified_memory

    assert threading.current_thread() is threading.main_thread()
    start = time.monotonic()
    with (
        pytest.raises(unified_memory.UnifiedMemoryCompileTimeoutError),
        unified_memory._compile_timeout(1),
    ):
        time.sleep(10)
    assert time.monotonic() - start < 5
