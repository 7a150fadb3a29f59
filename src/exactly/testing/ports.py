"""Ports for brokers started by tests: free now, and outside the kernel's ephemeral range.

A client reconnecting to a killed broker's port must not be given that very port as its own
source port. Linux hands out source ports from `net.ipv4.ip_local_port_range`; if the broker's
port lies in it, a reconnect can draw it, and TCP's simultaneous open then connects the client to
itself (its requests come back as answers) while the broker cannot bind its port again. A port
outside that range is never a source port.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path


class NoFreePort(RuntimeError):
    """No port outside the ephemeral range could be bound."""


def ephemeral_range() -> tuple[int, int]:
    """The kernel's source-port range (Linux's default if it cannot be read)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str, taken: set[int] | None = None) -> int:
    """A port that `host` can bind now, outside the ephemeral range and not in `taken` (which
    gets it added). Another process may still take it before the caller binds it: callers start
    over on another port when their bind fails."""
    taken = set() if taken is None else taken
    low, high = ephemeral_range()
    lo, hi = (10000, low - 1) if low > 12000 else (high + 1, 65535)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    rng = random.Random()
    for _ in range(200):
        port = rng.randint(lo, hi)
        if port in taken:
            continue
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        taken.add(port)
        return port
    raise NoFreePort(f"no free port found in {lo}-{hi} on {host}")
