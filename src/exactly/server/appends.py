"""The append service: durability of appended data under the flush policy, and wake-ups of the
fetches that wait for data.

Durability is a group commit under the `fsync` flush policy: requests that need it wait for the
next fsync round, and one round fsyncs every partition written since the previous one, so
concurrent producers share the cost of a flush. Under the `os` policy the page cache is enough
and nothing waits. Handlers and the transaction driver ask this service (`sync`, `sync_now`)
instead of checking the policy themselves.

A Fetch below its `min_bytes` waits here (`wait_for_append`) until an append to one of its
partitions (`notify_append`) or its `max_wait_ms`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from exactly.log import PartitionLog

FSYNC = "fsync"


class AppendService:
    def __init__(self, flush_policy: str) -> None:
        self.flush_policy = flush_policy
        self._pending: set[PartitionLog] = set()
        self._waiters: list[asyncio.Future[None]] = []
        self._running: asyncio.Task[None] | None = None
        self._append_waiters: dict[PartitionLog, set[asyncio.Future[None]]] = {}

    # -- durability -------------------------------------------------------------------------

    async def sync(self, logs: Iterable[PartitionLog]) -> None:
        """Return once everything appended to `logs` so far is durable under the flush policy."""
        if self.flush_policy != FSYNC:
            return
        self._pending.update(logs)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._flush_rounds())
        await fut

    def sync_now(self, plog: PartitionLog) -> None:
        """Make `plog` durable before anything else is appended anywhere (a blocking fsync under
        the fsync policy): for a record that must reach the disk before data that depends on it."""
        if self.flush_policy == FSYNC:
            plog.flush()

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

    # -- wake-ups ---------------------------------------------------------------------------

    def notify_append(self, plog: PartitionLog) -> None:
        """Wake the fetches long-polling on this partition."""
        waiters = self._append_waiters.pop(plog, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_for_append(self, logs: Iterable[PartitionLog], timeout: float) -> None:
        """Return after the next append to one of `logs`, or after `timeout` seconds."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        logs = list(logs)
        for plog in logs:
            self._append_waiters.setdefault(plog, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            for plog in logs:
                waiters = self._append_waiters.get(plog)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._append_waiters[plog]


def _fsync_all(logs: Iterable[PartitionLog]) -> None:
    for plog in logs:
        plog.flush()
