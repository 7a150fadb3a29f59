"""Early writeback under `log.flush.policy=fsync` (log/writeback.py, called by server/appends.py),
on real partition logs in a temporary directory, looked at in the kernel's page cache with
cachestat(2) (Linux 6.5 on, no privileges needed): once a waiter asks for a sync, the whole pages
of what was appended are already on their way to the disk (no longer dirty) before any round's
fdatasync has run; the round still makes everything durable before the waiter returns; small
appends start nothing until enough has gathered; the `os` policy starts nothing."""

from __future__ import annotations

import asyncio
import ctypes
import os
from pathlib import Path
from typing import NamedTuple

from exactly.log import LogConfig, PartitionLog
from exactly.log.writeback import PAGE, EarlyWriteback
from exactly.protocol.records import Record, build_batch
from exactly.server.appends import WRITEBACK_BYTES, AppendService

_SYS_CACHESTAT = 451  # the same number on x86-64 and arm64
_libc = ctypes.CDLL(None, use_errno=True)


class CacheStat(NamedTuple):
    """What cachestat(2) says of a file's pages in the page cache."""

    cached: int
    dirty: int
    writeback: int


def cachestat(fd: int) -> CacheStat:
    # struct cachestat_range {u64 off, len} (len 0: to the end); struct cachestat {u64 nr_cache,
    # nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted}.
    file_range = (ctypes.c_uint64 * 2)(0, 0)
    stat = (ctypes.c_uint64 * 5)()
    if _libc.syscall(_SYS_CACHESTAT, fd, file_range, stat, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"cachestat failed: {os.strerror(errno)} (needs Linux 6.5 or later)")
    return CacheStat(stat[0], stat[1], stat[2])


def _append(plog: PartitionLog, size: int) -> None:
    """Append about `size` bytes, in batches of 64 KiB values, one request as a producer sends."""
    batches = [build_batch([Record(b"k", os.urandom(64 * 1024))], timestamp=1)
               for _ in range(max(1, size // (64 * 1024)))]
    plog.append(b"".join(batches), now_ms=1)


def test_a_waiter_starts_the_writeback_of_its_pages_before_the_round_syncs_them(
        tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    appends = AppendService("fsync")
    _append(plog, 1024 * 1024)
    segment = plog.active_segment
    whole_pages = segment.size // PAGE

    async def main() -> CacheStat:
        waiting = asyncio.ensure_future(appends.sync([plog]))
        # The waiter runs to its wait, and only then (the round is scheduled after this step)
        # could the round's fdatasync begin.
        await asyncio.sleep(0)
        before_round = cachestat(segment.fd)
        assert plog.flushed_offset == 0, "the round ran before the page cache was looked at"
        await waiting
        return before_round

    before_round = asyncio.run(main())
    # Every whole page is under writeback or written already; only the last, partly filled one
    # may still be dirty (it is written back once full, or by the round).
    assert before_round.cached >= whole_pages
    assert before_round.dirty <= 1, before_round
    assert appends.writeback.calls == 1
    assert appends.writeback.bytes == whole_pages * PAGE
    # The round still syncs everything, the partial page too, before the waiter returns.
    assert plog.flushed_offset == plog.log_end_offset
    assert cachestat(segment.fd).dirty == 0


def test_small_appends_start_no_writeback_until_enough_gathers(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    writeback = EarlyWriteback(WRITEBACK_BYTES)
    _append(plog, 64 * 1024)
    writeback.after_append(plog)
    assert (writeback.calls, writeback.bytes) == (0, 0)  # 64 KiB: left to the round's sync

    _append(plog, WRITEBACK_BYTES)
    writeback.after_append(plog)
    first_end = plog.active_segment.size // PAGE * PAGE
    assert (writeback.calls, writeback.bytes) == (1, first_end)  # all whole pages, from 0

    _append(plog, WRITEBACK_BYTES)
    writeback.after_append(plog)
    second_end = plog.active_segment.size // PAGE * PAGE
    # From where the first call ended: no page is written back twice.
    assert (writeback.calls, writeback.bytes) == (2, second_end)
    assert cachestat(plog.active_segment.fd).dirty <= 1


def test_a_rolled_segment_is_written_back_from_its_start(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=WRITEBACK_BYTES * 3))
    writeback = EarlyWriteback(WRITEBACK_BYTES)
    _append(plog, WRITEBACK_BYTES * 2)
    writeback.after_append(plog)
    first = plog.active_segment
    _append(plog, WRITEBACK_BYTES * 2)  # past segment.bytes: the next append rolls
    _append(plog, WRITEBACK_BYTES * 2)
    assert plog.active_segment is not first
    writeback.after_append(plog)
    assert writeback.calls == 2
    assert writeback.bytes == (first.size // PAGE + plog.active_segment.size // PAGE) * PAGE
    assert cachestat(plog.active_segment.fd).dirty <= 1


def test_the_os_policy_starts_no_writeback(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(flush_policy="os"))
    appends = AppendService("os")
    _append(plog, 1024 * 1024)
    asyncio.run(appends.sync([plog]))
    assert (appends.writeback.calls, appends.writeback.bytes) == (0, 0)
