"""Whether the package index the real-download tests need is reachable from this machine."""

from __future__ import annotations

import socket


def pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError:
        return False
    return True
