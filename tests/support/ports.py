"""Rendezvous ports for the gloo process groups the tests start."""

from __future__ import annotations

import socket


def free_port() -> int:
    """An unused localhost TCP port for a torch.distributed rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
