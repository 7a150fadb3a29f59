"""The bytes of requests the broker is working on, bounded (Kafka's `queued.max.request.bytes`).

A request whose handler answers at once costs nothing past its frame. One whose handler waits (a
Produce waiting for its fsync round, a Fetch long poll, a JoinGroup waiting for its rebalance)
holds its decoded request until it is answered. Without a bound, clients that pipeline large
requests which wait could make the broker hold any number of them: 64 per connection, each up to
`socket.request.max.bytes`. Connections stop reading new requests while the bytes held reach
`queued.max.request.bytes` in total, or PER_CONNECTION on one connection (one request always
fits), and read again as answers free them: back-pressure through TCP, nothing refused or lost.
A frame being received counts from when it is complete; until then it is bounded by
`socket.request.max.bytes` and its buffer grows only as its bytes arrive.
"""

from __future__ import annotations

from collections.abc import Callable

PER_CONNECTION = 16 * 1024 * 1024  # bytes of waiting requests one connection may hold


class RequestMemory:
    def __init__(self, limit: int) -> None:
        self.limit = limit  # -1: no bound (Kafka's meaning)
        self.used = 0
        self._waiting: dict[Callable[[], None], None] = {}  # in order, each once

    @property
    def exhausted(self) -> bool:
        return 0 <= self.limit <= self.used

    def take(self, size: int) -> None:
        self.used += size

    def give(self, size: int) -> None:
        """`size` bytes are free again: the connections waiting for memory read again."""
        self.used -= size
        if self._waiting and not self.exhausted:
            waiting, self._waiting = self._waiting, {}
            for resume in waiting:
                resume()

    def wait(self, resume: Callable[[], None]) -> None:
        """Call `resume` once memory is freed."""
        self._waiting[resume] = None
