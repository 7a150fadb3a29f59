"""How the append service's sync rounds (server/appends.py) run, on real partition logs in a
temporary directory on disk: a round over other files starts at once instead of waiting for the
round that is running, a round over a file being synced waits for that sync to end, and the
syncs go through Linux AIO when the kernel has it, with no thread of the broker's involved."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from exactly.log import LogConfig, PartitionLog
from exactly.protocol.records import Record, build_batch
from exactly.server.appends import AppendService, _AioSyncs
from tests.rigs.powercut import PowerCutFS

# Enough dirty data that its fdatasync takes far longer than a sync of one small record.
BIG = 48 * 1024 * 1024
SLOW_SYNC_MS = 200


def _log(tmp_path: Path, name: str) -> PartitionLog:
    return PartitionLog.open(tmp_path / name, LogConfig())


def _append(plog: PartitionLog, size: int = 100) -> None:
    value = os.urandom(min(size, 512 * 1024))
    batches = [build_batch([Record(b"k", value)], timestamp=1)
               for _ in range(max(1, size // len(value)))]
    plog.append(b"".join(batches), now_ms=1)


def test_a_round_over_other_files_does_not_wait_for_the_running_round(tmp_path: Path) -> None:
    # The slow file's fdatasync takes SLOW_SYNC_MS (a FUSE filesystem that sleeps in fsync, as a
    # busy disk's flush does); the other file is on the local disk. (Two files of one ext4
    # filesystem would not do: in data=ordered mode a journal commit waits for the other file's
    # newly allocated data as well.)
    with PowerCutFS(tmp_path / "mnt", fsync_latency_ms=SLOW_SYNC_MS) as fs:
        slow_log = _log(fs.make_durable_dir("slow"), "t-0")
        fast_log = _log(tmp_path, "t-0")
        appends = AppendService("fsync")

        async def main() -> bool:
            _append(slow_log)
            slow = asyncio.ensure_future(appends.sync([slow_log]))
            await asyncio.sleep(0)  # the waiter asks for a round
            await asyncio.sleep(0)  # the round starts: the slow file's sync is under way
            _append(fast_log)
            await appends.sync([fast_log])
            fast_done_first = not slow.done()
            await slow
            return fast_done_first

        fast_done_first = asyncio.run(main())
        slow_log.close()
    assert fast_done_first, "the fast file's round waited for the slow file's"
    assert fast_log.flushed_offset == fast_log.log_end_offset
    assert slow_log.flushed_offset == slow_log.log_end_offset


def test_a_round_over_a_file_being_synced_waits_for_that_sync(tmp_path: Path) -> None:
    plog = _log(tmp_path, "t-0")
    appends = AppendService("fsync")

    async def main() -> list[int]:
        _append(plog, BIG)
        first = asyncio.ensure_future(appends.sync([plog]))
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # the first round runs
        _append(plog)  # written after that round's sync began: it needs a round of its own
        end = plog.log_end_offset
        order: list[int] = []
        first.add_done_callback(lambda _: order.append(1))
        second = asyncio.ensure_future(appends.sync([plog]))
        second.add_done_callback(lambda _: order.append(2))
        await asyncio.gather(first, second)
        assert plog.flushed_offset == end
        return order

    assert asyncio.run(main()) == [1, 2]


def test_rounds_sync_through_aio_without_a_thread(tmp_path: Path) -> None:
    logs = [_log(tmp_path, f"t-{i}") for i in range(3)]
    appends = AppendService("fsync")
    threads_before = threading.active_count()

    async def main() -> None:
        for _ in range(20):
            for plog in logs:
                _append(plog)
            await asyncio.gather(*(appends.sync([plog]) for plog in logs))
            assert all(plog.flushed_offset == plog.log_end_offset for plog in logs)

    asyncio.run(main())
    assert isinstance(appends._aio, _AioSyncs), "no AIO context (Linux 4.18 or later has one)"
    assert threading.active_count() == threads_before
