"""Raw-socket helpers for the tests of servers that close stalled connections (the store and the proxy)."""

from __future__ import annotations

import socket
import time

__all__ = ["closed_by_server"]


def closed_by_server(sock: socket.socket, within: float) -> tuple[bool, bytes]:
    """Read until the server closes the connection (or ``within`` seconds pass): (closed, bytes read)."""
    received = b""
    sock.settimeout(0.05)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return True, received
        if not chunk:
            return True, received
        received += chunk
    return False, received
