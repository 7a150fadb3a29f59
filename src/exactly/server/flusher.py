"""Group commit for the fsync flush policy.

Requests that need durability wait for the next fsync round; one round fsyncs every partition
written since the previous one, so concurrent producers share the cost of a flush. Under the `os`
policy the page cache is enough and waiting is skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from exactly.log import PartitionLog


class Flusher:
    def __init__(self, policy: str) -> None:
        self.policy = policy
        self._pending: set[PartitionLog] = set()
        self._waiters: list[asyncio.Future[None]] = []
        self._running: asyncio.Task[None] | None = None

    async def sync(self, logs: Iterable[PartitionLog]) -> None:
        if self.policy != "fsync":
            return
        self._pending.update(logs)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._flush_rounds())
        await fut

    async def _flush_rounds(self) -> None:
        # Waiters that arrive during a round were written after its fsyncs began: next round.
        while self._waiters:
            logs, self._pending = self._pending, set()
            waiters, self._waiters = self._waiters, []
            try:
                await asyncio.to_thread(_fsync_all, logs)
            except Exception as exc:  # noqa: BLE001 - an fsync failure goes to every waiter
                for fut in waiters:
                    if not fut.done():
                        fut.set_exception(exc)
            else:
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(None)


def _fsync_all(logs: Iterable[PartitionLog]) -> None:
    for plog in logs:
        plog.flush()
