"""The append service's group commit across files (server/appends.py), on real partition logs in
a temporary directory: one round syncs every log its waiters wrote, in parallel threads; a
waiter whose logs are durable already waits for no round; a failed sync reaches every waiter of
its round."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from exactly.log import LogConfig, PartitionLog
from exactly.protocol.records import Record, build_batch
from exactly.server.appends import AppendService


def _logs(tmp_path: Path, count: int) -> list[PartitionLog]:
    return [PartitionLog.open(tmp_path / f"t-{i}", LogConfig()) for i in range(count)]


def _append(plog: PartitionLog) -> None:
    plog.append(build_batch([Record(b"k", b"v")], timestamp=1), now_ms=1)


def test_one_round_makes_every_log_of_its_waiters_durable(tmp_path: Path) -> None:
    logs = _logs(tmp_path, 6)
    appends = AppendService("fsync")

    async def main() -> None:
        for plog in logs:
            _append(plog)
        # Three waiters of two logs each: the round began by the first syncs all six.
        await asyncio.gather(*(appends.sync(logs[i:i + 2]) for i in range(0, 6, 2)))

    asyncio.run(main())
    assert [plog.flushed_offset for plog in logs] == [1] * 6


def test_a_waiter_whose_logs_are_durable_waits_for_no_round(tmp_path: Path) -> None:
    (plog,) = _logs(tmp_path, 1)
    appends = AppendService("fsync")
    _append(plog)
    plog.flush()
    waiting = appends.sync([plog])
    with pytest.raises(StopIteration):  # done at its first step: it never suspended
        waiting.send(None)


def test_a_failed_sync_reaches_every_waiter_of_its_round(tmp_path: Path) -> None:
    logs = _logs(tmp_path, 3)
    appends = AppendService("fsync")

    async def main() -> list[BaseException | None]:
        for plog in logs:
            _append(plog)
        # The active segment's descriptor of one log is closed under it: its fdatasync fails.
        os.close(logs[1].active_segment.fd)
        results = await asyncio.gather(appends.sync(logs[:2]), appends.sync(logs[2:]),
                                       return_exceptions=True)
        return list(results)

    results = asyncio.run(main())
    assert all(isinstance(r, OSError) for r in results), results
