"""A machine loaded on purpose: busy-loop processes a test starts and stops itself.

Why: interrupts that are honoured only on an idle machine are a defect; the loaded variants
of the interrupt tests run their command beside `burners` processes that spin on the CPU.
Each burner also ends itself after `limit_s`, so a test killed mid-way leaves none behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

BURN = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    pass\n"


def default_burners() -> int:
    """Two busy processes per core: every core is oversubscribed while they run."""
    return 2 * (os.cpu_count() or 1)


@contextmanager
def cpu_burners(count: int | None = None, limit_s: float = 240.0) -> Iterator[list[int]]:
    """Run `count` busy-loop processes (default two per core) for the block; their pids."""
    procs = [
        subprocess.Popen([sys.executable, "-c", BURN.format(limit=limit_s)])
        for _ in range(default_burners() if count is None else count)
    ]
    try:
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def load_average() -> float:
    """The 1-minute load average (reported beside interrupt latencies)."""
    return os.getloadavg()[0]
