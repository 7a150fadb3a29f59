"""The append service: durability of appended data under the flush policy, and wake-ups of the
fetches that wait for data.

Durability is a group commit across files under the `fsync` flush policy: requests that need it
wait for the next sync round, and one round syncs every log written since the previous one —
data partitions, `__transaction_state` and `__consumer_offsets` alike — so concurrent producers,
and the coordinators' records beside the data, share the cost of a flush. A round with several
files syncs them in parallel threads: a journaling filesystem (ext4's jbd2, XFS's log) commits
the metadata of concurrent syncs together, so a round over k files costs about one sync, not k
(k = 8: 0.5 ms against 1.8 ms one after the other, on this project's 2-core test machine).
Waiters whose logs are durable already (a duplicate retried, an AddPartitionsToTxn that added
nothing) wait for no round. A waiter starts the writeback of the pages it waits for at once
(log/writeback.py, `sync_file_range`): a producer with requests in flight appends while the
previous round runs, and without it the next round's fdatasync would write all of that out
before returning (1 KiB records from one idempotent producer: 1.3-1.7 ms of fdatasync per MiB
without, 0.4-0.5 ms with). The round's fdatasync stays what makes the data durable. Under the
`os` policy the page cache is enough and nothing waits, nor is any writeback started.
Handlers and the transaction driver ask this service (`sync`, `sync_now`) instead of checking the
policy themselves.

What must be durable before what is the callers' business, and a round never reorders it: a
record that must reach the disk before another is written (PrepareCommit before the markers,
the markers before CompleteCommit, server/transactions.py) is synced by one round that ends
before the other record is appended at all. A round only ever makes durable what was written
before it began, in any order, which is all that parallel syncs change: the page cache may
write back any page at any moment, so an order that a sync does not enforce does not hold
either way.

A Fetch below its `min_bytes` waits here (`wait_for_append`) until an append to one of its
partitions (`notify_append`) or its `max_wait_ms`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from exactly.log import PartitionLog
from exactly.log.writeback import EarlyWriteback

FSYNC = "fsync"
# Syncs of one round that run at once (one thread each, beside the round's own): enough for the
# files of a busy round, few enough that a round never floods the disk's queue.
PARALLEL_SYNCS = 8
# Early writeback (log/writeback.py) starts once this much of a log waits for a round: one call
# per request of a busy producer (1 MiB), one per several small ones; the round's sync is left
# with less than this and a page per log.
WRITEBACK_BYTES = 256 * 1024


class AppendService:
    def __init__(self, flush_policy: str) -> None:
        self.flush_policy = flush_policy
        self._pending: set[PartitionLog] = set()
        self._waiters: list[asyncio.Future[None]] = []
        self._running: asyncio.Task[None] | None = None
        self._append_waiters: dict[PartitionLog, set[asyncio.Future[None]]] = {}
        self._sync_threads: ThreadPoolExecutor | None = None  # made at the first parallel round
        # Under fsync, the disk starts on the data a round will sync as soon as it waits for one.
        self.writeback = EarlyWriteback(WRITEBACK_BYTES if flush_policy == FSYNC else 0)

    # -- durability -------------------------------------------------------------------------

    async def sync(self, logs: Iterable[PartitionLog]) -> None:
        """Return once everything appended to `logs` so far is durable under the flush policy."""
        if self.flush_policy != FSYNC:
            return
        dirty = [plog for plog in logs if plog.flushed_offset < plog.log_end_offset]
        if not dirty:
            return  # durable already: a round would sync nothing
        for plog in dirty:
            self.writeback.after_append(plog)
        self._pending.update(dirty)
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
                await asyncio.to_thread(self._sync_round, list(logs))
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

    def _sync_round(self, logs: list[PartitionLog]) -> None:
        """Sync `logs` (in a worker thread): the first here, the others in parallel threads.
        A log closed meanwhile (its topic deleted) has nothing left to make durable."""
        logs = [plog for plog in logs if not plog.closed]
        if not logs:
            return
        others: list[Future[None]] = []
        if len(logs) > 1:
            if self._sync_threads is None:
                self._sync_threads = ThreadPoolExecutor(PARALLEL_SYNCS,
                                                        thread_name_prefix="exactly-sync")
            others = [self._sync_threads.submit(plog.flush) for plog in logs[1:]]
        try:
            logs[0].flush()
        finally:
            wait(others)  # every sync ends before the round does, whether or not one failed
        for future in others:
            future.result()  # the first failure, if any, goes to the round's waiters
