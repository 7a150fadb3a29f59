"""The append service: durability of appended data under the flush policy, and wake-ups of the
fetches that wait for data.

Durability is a group commit across files under the `fsync` flush policy: requests that need it
wait for the next sync round, and one round syncs every log written since the previous one —
data partitions, `__transaction_state` and `__consumer_offsets` alike — so concurrent producers,
and the coordinators' records beside the data, share the cost of a flush. The waiters of one
turn of the event loop share a round. A round syncs its files in parallel: a journaling
filesystem (ext4's jbd2, XFS's log) commits the metadata of concurrent syncs together, so a
round over k files costs about one sync, not k (k = 8: 0.5 ms against 1.8 ms one after the
other, on this project's 2-core test machine). Rounds over different files run at once; a
round that needs a file a running round is syncing starts when that round ends.

The syncs go through Linux AIO (`IOCB_CMD_FDSYNC`, `_AioSyncs`): the loop submits a round's
fdatasyncs in one call and an eventfd it watches says when they are done, so no Python thread
wakes and none waits for the GIL. Through threads (a pool's task per round that synced one file
itself and handed the others to more threads, then woke the loop through a chain of futures and
a task), a 1-record transaction of librdkafka cost the broker 1.2-1.5 ms of CPU and 31-36
context switches under `fsync` (0.45 ms and 4.5 under `os`); through AIO, 0.9 ms and 9 (the
kernel's workers that run the syncs are not the broker's process: part of the difference is the
fdatasync's own kernel CPU moved there; per round in-process, 1 file: 160-200 µs of CPU through
the pool, 60-70 through AIO). Where AIO is missing, threads do the syncs, one woken per sync,
the last waking the loop once.

Waiters whose logs are durable already (a duplicate retried, an AddPartitionsToTxn that added
nothing) wait for no round. A waiter starts the writeback of the pages it waits for at once
(log/writeback.py, `sync_file_range`): a producer with requests in flight appends while the
previous round runs, and without it the next round's fdatasync would write all of that out
before returning (1 KiB records from one idempotent producer: 1.3-1.7 ms of fdatasync per MiB
without, 0.4-0.5 ms with). The round's fdatasync stays what makes the data durable. Under the
`os` policy the page cache is enough and nothing waits, nor is any writeback started.
Handlers and the transaction driver ask this service (`sync`, `not_durable`) instead of checking
the policy themselves. Nothing here blocks the event loop on the disk.

What must be durable before what is the callers' business, and a round never reorders it: a
record that must reach the disk before another is written (PrepareCommit before the markers,
the markers before CompleteCommit, server/transactions.py) is synced by one round that ends
before the other record is appended at all. A round only ever makes durable what was written
before it began, in any order, which is all that parallel syncs and rounds running at once
change: the page cache may write back any page at any moment, so an order that a sync does not
enforce does not hold either way.

A Fetch below its `min_bytes` waits here (`wait_for_append`) until an append to one of its
partitions (`notify_append`) or its `max_wait_ms`.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import platform
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable

from exactly.log import PartitionLog
from exactly.log.writeback import EarlyWriteback

log = logging.getLogger("exactly.appends")

FSYNC = "fsync"
# Syncs that run at once (one thread each): enough for the files of a busy round, few enough
# that the rounds never flood the disk's queue.
PARALLEL_SYNCS = 8
# A sync thread with nothing to do for this long ends (the next round starts one again).
IDLE_SECONDS = 10.0
# Early writeback (log/writeback.py) starts once this much of a log waits for a round: one call
# per request of a busy producer (1 MiB), one per several small ones; the round's sync is left
# with less than this and a page per log.
WRITEBACK_BYTES = 256 * 1024


class _Round:
    """One sync round: its files, its waiters, the syncs still running, the first failure."""

    __slots__ = ("error", "left", "lock", "logs", "waiters")

    def __init__(self, logs: set[PartitionLog], waiters: list[asyncio.Future[None]]) -> None:
        self.logs = logs
        self.waiters = waiters
        self.left = len(logs)
        self.error: BaseException | None = None
        self.lock = threading.Lock()  # its syncs end in the loop's thread and in sync threads

    def ended(self, error: BaseException | None) -> bool:
        """One sync of the round ended (`error`: how it failed); True for the last."""
        with self.lock:
            if error is not None and self.error is None:
                self.error = error
            self.left -= 1
            return self.left == 0


_Done = Callable[[_Round], object]  # run on the event loop once a round's syncs have all ended


class AppendService:
    def __init__(self, flush_policy: str) -> None:
        self.flush_policy = flush_policy
        # The next round: its files and waiters, gathered until it can start.
        self._pending: set[PartitionLog] = set()
        self._waiters: list[asyncio.Future[None]] = []
        self._start_scheduled = False
        self._busy: set[PartitionLog] = set()  # the files of the rounds running now
        self._append_waiters: dict[PartitionLog, set[asyncio.Future[None]]] = {}
        self._syncs: _SyncThreads | None = None  # made at the first round that needs them
        self._aio: _AioSyncs | None = None  # made at the first round, if the kernel has it
        self._aio_tried = False
        # Under fsync, the disk starts on the data a round will sync as soon as it waits for one.
        self.writeback = EarlyWriteback(WRITEBACK_BYTES if flush_policy == FSYNC else 0)

    # -- durability -------------------------------------------------------------------------

    async def sync(self, logs: Iterable[PartitionLog], *, start_now: bool = False) -> None:
        """Return once everything appended to `logs` so far is durable under the flush policy.
        `start_now`: the round starts now (if its files are free), not at the end of this turn
        of the loop with the turn's other waiters: for a wait that holds back the caller's own
        appends (the partitions a Produce adds, server/admission.py)."""
        dirty = self.not_durable(logs)
        if not dirty:
            return  # durable already (or nothing is synced): a round would sync nothing
        for plog in dirty:
            self.writeback.after_append(plog)
        self._pending.update(dirty)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append(fut)
        if start_now:
            self._start_round(loop)
        elif not self._start_scheduled:
            # At the end of this turn of the loop, so that the waiters of one turn share a round.
            self._start_scheduled = True
            loop.call_soon(self._start_round, loop)
        await fut

    def not_durable(self, logs: Iterable[PartitionLog]) -> list[PartitionLog]:
        """Those of `logs` that `sync` would wait for: under the fsync policy, the ones with
        appends not yet synced; else none."""
        if self.flush_policy != FSYNC:
            return []
        return [plog for plog in logs if plog.flushed_offset < plog.log_end_offset]

    def _start_round(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the next round, unless one of its files is being synced by a running round:
        what was written to that file after its sync began needs a sync begun later, so the
        round starts when that one ends (`_round_done`), with whatever gathered meanwhile.
        Rounds over different files run at once: each makes durable what was written to its
        files before it began, which is all a waiter asks.

        Starting at once over a file being synced would be correct too (an fdatasync covers
        every write made before it is called, whatever else syncs the file meanwhile). Tried
        on 2026-11-25 for the case that waits most here, one idempotent producer whose ~1 MiB
        requests go to one partition: no gain above the noise, in the broker (10 interleaved
        runs of `bench/txn_fsync.py --produce`'s load) or in-process (14 runs of 5 appends of
        1 MiB in flight). Such a sync waits for the pages the running one writes anyway and
        pays a cache flush of its own, where the round that waits covers all that gathered
        meanwhile with one."""
        self._start_scheduled = False
        if not self._waiters or not self._pending.isdisjoint(self._busy):
            return
        # A log closed meanwhile (its topic deleted) has nothing left to make durable.
        logs = {plog for plog in self._pending if not plog.closed}
        waiters = self._waiters
        self._pending, self._waiters = set(), []
        if not logs:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
            return
        round_ = _Round(logs, waiters)
        self._busy |= logs
        if not self._aio_tried:
            self._aio_tried = True
            self._aio = _AioSyncs.open()
        left = list(logs)
        if self._aio is not None:
            left = self._aio.submit(loop, round_, left, self._round_done)
        if left and self._syncs is None:
            self._syncs = _SyncThreads(PARALLEL_SYNCS)
        for plog in left:
            assert self._syncs is not None
            self._syncs.submit(plog, round_, loop, self._round_done)

    def _round_done(self, round_: _Round) -> None:
        """On the event loop, once every sync of `round_` has ended: answer its waiters (an fsync
        failure goes to every one of them) and start the round that waited for its files."""
        self._busy -= round_.logs
        for fut in round_.waiters:
            if not fut.done():
                if round_.error is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(round_.error)
        if self._waiters and not self._start_scheduled:
            self._start_scheduled = True
            self._start_round(asyncio.get_running_loop())

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


_Job = tuple[PartitionLog, _Round, asyncio.AbstractEventLoop, _Done]


class _SyncThreads:
    """Up to `size` threads that run the syncs of rounds, each the fdatasync of one file. A sync
    goes to an idle thread of its own, woken alone (a queue that several idle threads wait on
    wakes more than one per item, and each then competes for the GIL); the thread that ends a
    round's last sync wakes the event loop once, with `done(round)`: no future per sync, no
    thread that waits for the others."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()  # guards what follows
        self._idle: list[_SyncThread] = []  # the most recently idle last: its stack is warm
        self._backlog: deque[_Job] = deque()  # syncs waiting for a thread (all `size` busy)
        self._threads = 0

    def submit(self, plog: PartitionLog, round_: _Round, loop: asyncio.AbstractEventLoop,
               done: _Done) -> None:
        job = (plog, round_, loop, done)
        with self._lock:
            if self._idle:
                thread = self._idle.pop()
                thread.job = job
            elif self._threads < self._size:
                self._threads += 1
                threading.Thread(target=self._run, args=(_SyncThread(), job),
                                 name="exactly-sync", daemon=True).start()
                return
            else:
                self._backlog.append(job)
                return
        thread.wake.release()

    def _run(self, me: _SyncThread, job: _Job | None) -> None:
        while job is not None:
            self._sync(*job)
            with self._lock:
                if self._backlog:
                    job = self._backlog.popleft()
                    continue
                me.job = None
                self._idle.append(me)
            if not me.wake.acquire(timeout=IDLE_SECONDS):
                with self._lock:
                    if me in self._idle:  # still idle: no sync was handed to it meanwhile
                        self._idle.remove(me)
                        self._threads -= 1
                        return
                me.wake.acquire()  # a sync was handed over just now: its release follows
            job = me.job

    def _sync(self, plog: PartitionLog, round_: _Round, loop: asyncio.AbstractEventLoop,
              done: _Done) -> None:
        error: BaseException | None = None
        try:
            plog.flush()
        except BaseException as exc:  # noqa: BLE001 - goes to the round's waiters
            error = exc
        if round_.ended(error):
            try:
                loop.call_soon_threadsafe(done, round_)
            except RuntimeError:
                pass  # the loop is closed: nobody waits any more


class _SyncThread:
    """An idle sync thread waits on `wake` (held while it has nothing to do) for its `job`."""

    __slots__ = ("job", "wake")

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()
        self.job: _Job | None = None


# Linux AIO (linux/aio_abi.h): x86-64 and aarch64 system call numbers, the fdatasync command.
_AIO_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
_IOCB_CMD_FDSYNC = 3
_IOCB_FLAG_RESFD = 1  # count each completion on an eventfd
_AIO_EVENTS = 256  # syncs in flight at once; a round with more gives the rest to threads


class _Iocb(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("key", ctypes.c_uint32),
                ("rw_flags", ctypes.c_int32), ("opcode", ctypes.c_uint16),
                ("reqprio", ctypes.c_int16), ("fildes", ctypes.c_uint32),
                ("buf", ctypes.c_uint64), ("nbytes", ctypes.c_uint64),
                ("offset", ctypes.c_int64), ("reserved2", ctypes.c_uint64),
                ("flags", ctypes.c_uint32), ("resfd", ctypes.c_uint32)]


class _IoEvent(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64), ("res", ctypes.c_int64),
                ("res2", ctypes.c_int64)]


class _AioSyncs:
    """The syncs of rounds through Linux AIO (`IOCB_CMD_FDSYNC`, Linux 4.18 and later): the
    event loop submits a round's fdatasyncs in one `io_submit`, the kernel runs each in a worker
    of its own, and an eventfd the loop watches counts their completions. No Python thread
    wakes, none waits for the GIL: a round costs the loop about 25 µs of CPU against about
    120 µs through threads (2 files, this project's test machine), and its waiters resume in
    the turn the eventfd wakes. The sync is the kernel's `vfs_fsync_range` as for fdatasync,
    and the operation holds its file, so a segment closed meanwhile is still synced. Where AIO
    is missing (not Linux, no such command, `fs.aio-max-nr` reached) `open` returns None and
    the threads do it all; a sync `io_submit` refuses goes to the threads too, which also
    report a bad descriptor the same way as before."""

    def __init__(self, context: int, eventfd: int,
                 syscall: Callable[..., int], numbers: tuple[int, int, int, int]) -> None:
        self._context = context
        self._eventfd = eventfd
        self._syscall = syscall
        self._destroy, self._getevents, self._submit = numbers[1], numbers[2], numbers[3]
        # Syncs in flight: id -> (log, its end when submitted, round, iocb, done).
        self._jobs: dict[int, tuple[PartitionLog, int, _Round, _Iocb, _Done]] = {}
        self._next_id = 0
        self._events = (_IoEvent * 64)()
        self._no_wait = _Timespec(0, 0)
        self._loop: asyncio.AbstractEventLoop | None = None
        weakref.finalize(self, _AioSyncs._close, syscall, numbers[1], context, eventfd)

    @classmethod
    def open(cls) -> _AioSyncs | None:
        numbers = _AIO_SYSCALLS.get(platform.machine())
        if not sys.platform.startswith("linux") or numbers is None:
            return None
        try:
            syscall = ctypes.CDLL(None, use_errno=True).syscall
        except (OSError, AttributeError):
            return None
        syscall.restype = ctypes.c_long
        context = ctypes.c_ulong(0)
        if syscall(numbers[0], _AIO_EVENTS, ctypes.byref(context)) != 0:
            log.info("event=aio_unavailable errno=%d: sync rounds use threads",
                     ctypes.get_errno())
            return None
        eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        return cls(context.value, eventfd, syscall, numbers)

    @staticmethod
    def _close(syscall: Callable[..., int], destroy: int, context: int, eventfd: int) -> None:
        syscall(destroy, ctypes.c_ulong(context))
        os.close(eventfd)

    def submit(self, loop: asyncio.AbstractEventLoop, round_: _Round, logs: list[PartitionLog],
               done: _Done) -> list[PartitionLog]:
        """Start the syncs of `logs` for `round_`; returns the logs it could not start."""
        if loop is not self._loop:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._eventfd)
            loop.add_reader(self._eventfd, self._completed)
            self._loop = loop
        ids: list[int] = []
        iocbs = (ctypes.POINTER(_Iocb) * len(logs))()
        for i, plog in enumerate(logs):
            iocb = _Iocb(data=self._next_id, opcode=_IOCB_CMD_FDSYNC,
                         fildes=plog.active_segment.fd, flags=_IOCB_FLAG_RESFD,
                         resfd=self._eventfd)
            iocbs[i] = ctypes.pointer(iocb)
            self._jobs[self._next_id] = (plog, plog.log_end_offset, round_, iocb, done)
            ids.append(self._next_id)
            self._next_id += 1
        started = self._syscall(self._submit, ctypes.c_ulong(self._context), len(logs), iocbs)
        started = max(started, 0)
        for job_id in ids[started:]:  # refused (a full context, a bad descriptor): threads
            del self._jobs[job_id]
        return logs[started:]

    def _completed(self) -> None:
        """The eventfd counts finished syncs: collect them, end their rounds."""
        try:
            os.eventfd_read(self._eventfd)
        except BlockingIOError:
            return
        while True:
            got = self._syscall(self._getevents, ctypes.c_ulong(self._context), 0,
                                len(self._events), self._events, ctypes.byref(self._no_wait))
            for event in self._events[:max(got, 0)]:
                plog, end, round_, _, done = self._jobs.pop(event.data)
                error: OSError | None = None
                if event.res < 0:
                    error = OSError(-event.res, f"fdatasync of {plog.topic}-{plog.partition} "
                                    f"failed: {os.strerror(-event.res)}")
                else:
                    plog.synced_to(end)
                if round_.ended(error):
                    done(round_)
            if got < len(self._events):
                return


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]
