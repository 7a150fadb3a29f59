"""How many connections the broker keeps, with Kafka's keys: `max.connections`,
`max.connections.per.ip`, `max.connections.per.ip.overrides` (`host:count,host:count`), and
`connections.max.idle.ms` (the broker's idle sweep closes connections silent for longer); and
what they may make the broker hold, `queued.max.request.bytes` (request_memory.py).

Whatever `max.connections` says, the broker keeps a reserve of file descriptors for its own work
(segments, indexes, snapshots, the cleaner's files, the transaction driver's writes): clients may
use the process's descriptor limit less that reserve. A connection over a limit is closed as soon
as it is accepted, as Kafka closes it, with a warning now and then (not one per refusal: a flood
of them must not flood the log).
"""

from __future__ import annotations

import logging
import resource
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from exactly.configdef import split_list
from exactly.server.request_memory import RequestMemory

log = logging.getLogger(__name__)

FD_RESERVE = 512  # descriptors kept for the broker's own files
_WARN_EVERY = 10.0  # seconds between two warnings about refused connections


def parse_overrides(text: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: `host:count` items, comma-separated."""
    overrides: dict[str, int] = {}
    for item in split_list(text):
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.isdigit():
            raise ValueError(f"{item!r} is not HOST:COUNT")
        overrides[host] = int(count)
    return overrides


def descriptor_budget(reserve: int = FD_RESERVE) -> int:
    """The connections the descriptor limit leaves room for, after the broker's reserve."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 2**31 - 1
    return max(1, soft - reserve)


class ConnectionLimits:
    def __init__(self, max_connections: int, per_ip: int, overrides: Mapping[str, int],
                 queued_bytes: int = -1) -> None:
        self.memory = RequestMemory(queued_bytes)
        self.max_connections = min(max_connections, descriptor_budget())
        self.per_ip = per_ip
        self.overrides = dict(overrides)
        self.total = 0
        self.by_ip: Counter[str] = Counter()
        self.refused = 0
        self._warned = 0.0
        self._refused_since_warning = 0

    @classmethod
    def from_config(cls, config: Any) -> ConnectionLimits:
        return cls(config["max.connections"], config["max.connections.per.ip"],
                   config["max.connections.per.ip.overrides"], config["queued.max.request.bytes"])

    def admit(self, ip: str) -> bool:
        """Count a new connection from `ip`; False (and nothing counted) if it is over a limit."""
        limit = self.overrides.get(ip, self.per_ip)
        if self.total >= self.max_connections:
            self._refuse(f"max.connections={self.max_connections} reached")
            return False
        if self.by_ip[ip] >= limit:
            self._refuse(f"max.connections.per.ip={limit} reached for {ip}")
            return False
        self.total += 1
        self.by_ip[ip] += 1
        return True

    def release(self, ip: str) -> None:
        self.total -= 1
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]

    def _refuse(self, why: str) -> None:
        self.refused += 1
        self._refused_since_warning += 1
        now = time.monotonic()
        if now - self._warned >= _WARN_EVERY:
            log.warning("event=connections_refused count=%d reason=%r",
                        self._refused_since_warning, why)
            self._warned, self._refused_since_warning = now, 0
