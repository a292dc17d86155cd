"""Picking a port for a server that another process will bind.

A port found free cannot be held for the process that binds it later. A port
from the kernel (bind to 0) comes from the ephemeral range, the same range the
kernel hands to outgoing connections, and a busy machine opens thousands: one
of them took a sidecar's port between the pick and the bind (seen in CI). So
ports are drawn below the ephemeral range, where only listeners go.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Linux's default ephemeral range starts here; used where the range cannot be read.
DEFAULT_EPHEMERAL_LOW = 32768
# Below this lie the registered ports of well-known services.
LOWEST_PICKED = 15000
PICK_ATTEMPTS = 200


def ephemeral_low(range_file: Path = EPHEMERAL_RANGE_FILE) -> int:
    try:
        low = int(range_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW
    return low


def can_bind(host: str, port: int) -> bool:
    """Whether a listener could bind `host:port` now. SO_REUSEADDR as the servers
    use it: a port whose last connections linger in TIME_WAIT is free for them."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def unused_port(host: str = "127.0.0.1") -> int:
    """A port that can be bound now, outside the ephemeral range when there is
    room below it (else any port the kernel hands out)."""
    high = ephemeral_low()
    if high - LOWEST_PICKED >= PICK_ATTEMPTS:
        for port in random.sample(range(LOWEST_PICKED, high), PICK_ATTEMPTS):
            if can_bind(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        picked: int = sock.getsockname()[1]
        return picked
