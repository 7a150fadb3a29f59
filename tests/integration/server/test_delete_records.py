"""DeleteRecords (KIP-107, issue 17): the log start offset (low watermark) moves forward, whole
segments below it go, it survives a reopen without a clean close (the checkpoint is written
before the answer), and over the wire: ListOffsets earliest answers it, Fetch below it gets
OFFSET_OUT_OF_RANGE, -1 means the high watermark, past it is OFFSET_OUT_OF_RANGE, compacted-only
topics refuse (POLICY_VIOLATION) — and all of it after kill -9."""

from __future__ import annotations

import datetime
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest

from exactly.log import LogConfig, LogManager
from exactly.log.cleaner import LogCleaner
from exactly.log.config import CleanerConfig
from exactly.log.errors import OffsetOutOfRangeError
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from tests.helpers.log.log_helpers import FakeClock, batch, offsets_of
from tests.rawclient import RawConnection
from tests.support import create_topic, produce_confluent

SMALL_SEGMENTS = LogConfig(segment_bytes=400, index_interval_bytes=100)


def _manager(path: Path, config: LogConfig = SMALL_SEGMENTS) -> LogManager:
    return LogManager(path, config, clock=FakeClock())


def _fill(manager: LogManager, topic: str, batches: int) -> None:
    plog = manager.get_log(topic, 0)
    for i in range(batches):
        plog.append(batch(3, prefix=f"b{i}-".encode()))


def test_log_start_moves_segments_go_and_reads_below_fail(tmp_path: Path) -> None:
    m = _manager(tmp_path / "data")
    m.create_topic("t", 1)
    _fill(m, "t", 12)  # 36 records over several 400-byte segments
    plog = m.get_log("t", 0)
    segments_before = len(plog.segments)
    assert segments_before > 3
    assert m.delete_records("t", 0, 20) == 20
    assert plog.log_start_offset == 20
    # Every segment wholly below 20 is gone; the one holding 20 stays (the start is logical).
    assert plog.segments[0].base_offset <= 20 < plog.segments[0].next_offset
    assert len(plog.segments) < segments_before
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(19, 10_000)
    # A read at the start returns the batch holding it (as Kafka does; clients skip below it).
    assert 20 in offsets_of(plog.read(20, 10_000))
    # Never backwards; past the high watermark is out of range.
    assert m.delete_records("t", 0, 5) == 20
    with pytest.raises(OffsetOutOfRangeError):
        m.delete_records("t", 0, plog.high_watermark + 1)
    assert m.delete_records("t", 0, plog.high_watermark) == 36
    assert plog.read(36, 10_000) == b""


def test_the_log_start_survives_a_crash_and_a_clean_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    m = _manager(data)
    m.create_topic("t", 1)
    _fill(m, "t", 4)
    m.delete_records("t", 0, 7)  # inside the first segment: nothing but the checkpoint holds it
    # No close(): what a kill -9 right after the answer leaves.
    crashed = _manager(data)
    assert crashed.get_log("t", 0).log_start_offset == 7
    crashed.close()
    assert _manager(data).get_log("t", 0).log_start_offset == 7


def test_a_recreated_topic_does_not_inherit_the_old_log_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    m = _manager(data)
    m.create_topic("t", 1)
    _fill(m, "t", 4)
    m.delete_records("t", 0, 10)
    m.delete_topic("t")
    m.create_topic("t", 1)
    _fill(m, "t", 6)
    assert _manager(data).get_log("t", 0).log_start_offset == 0


def test_retention_deletes_what_the_cleaner_held_back(tmp_path: Path) -> None:
    m = _manager(tmp_path / "data", LogConfig(segment_bytes=400, cleanup_policy="compact,delete"))
    m.create_topic("t", 1)
    _fill(m, "t", 12)
    plog = m.get_log("t", 0)
    count = len(plog.segments)
    plog.cleaning = True  # the cleaner copies segments: nothing may be deleted under it
    assert m.delete_records("t", 0, 30) == 30
    assert len(plog.segments) == count
    plog.cleaning = False
    assert m.apply_retention(FakeClock().ms) > 0
    assert plog.segments[0].base_offset <= 30 and plog.log_start_offset == 30


def test_compaction_keeps_working_above_the_log_start(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=400, cleanup_policy="compact,delete",
                       min_cleanable_dirty_ratio=0.0)
    m = _manager(tmp_path / "data", config)
    m.create_topic("t", 1)
    _fill(m, "t", 12)  # keys k0..k2 in every batch: 36 records, 3 live keys
    plog = m.get_log("t", 0)
    m.delete_records("t", 0, 10)
    cleaner = LogCleaner(tmp_path / "data", m.logs, CleanerConfig())
    assert cleaner.clean_once(FakeClock().ms) is not None
    assert plog.log_start_offset == 10
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(9, 10_000)
    # Read from the start to the end: compaction dropped older values of the keys, the newest
    # of each (the last batch, 33-35) is there.
    kept: list[int] = []
    offset = plog.log_start_offset
    while offset < plog.high_watermark:
        found = offsets_of(plog.read(offset, 1 << 20))
        kept += [o for o in found if o >= offset]
        offset = found[-1] + 1
    assert kept[-3:] == [33, 34, 35]
    assert len(kept) < 36 - 10


def test_producers_and_transactions_stay_right_across_the_log_start(tmp_path: Path) -> None:
    m = _manager(tmp_path / "data")
    m.create_topic("t", 1)
    plog = m.get_log("t", 0)
    # An idempotent producer whose records all go: it goes on without a sequence gap (KIP-360
    # keeps its state), and a retry of its last batch is still a duplicate.
    plog.append(batch(3, pid=7, epoch=0, seq=0))
    plog.append(batch(3, pid=7, epoch=0, seq=3))
    m.delete_records("t", 0, plog.high_watermark)
    assert plog.append(batch(3, pid=7, epoch=0, seq=3)).duplicate
    assert plog.append(batch(2, pid=7, epoch=0, seq=6)).base_offset == 6
    # An open transaction that began below the new start: the LSO is never below the log start,
    # and the commit marker frees it.
    plog.append(batch(2, pid=9, epoch=0, seq=0, transactional=True))  # offsets 8-9
    plog.append(batch(2))  # 10-11
    m.delete_records("t", 0, 9)
    assert plog.last_stable_offset == 9
    plog.append_marker(9, 0, commit=True)
    assert plog.last_stable_offset == plog.high_watermark == 13


# -- over the wire ------------------------------------------------------------------------------


def _delete(conn: RawConnection, topic: str, offsets: dict[int, int],
            version: int = 2) -> dict[int, Any]:
    schema = import_module(f"kio.schema.delete_records.v{version}.request")
    topic_cls, part_cls = schema.DeleteRecordsTopic, schema.DeleteRecordsPartition
    response = conn.request(ApiKey.DELETE_RECORDS, version, timeout=datetime.timedelta(seconds=5),
                            topics=(topic_cls(name=topic, partitions=tuple(
                                part_cls(partition_index=p, offset=o)
                                for p, o in offsets.items())),))
    return {p.partition_index: p for p in response.topics[0].partitions}


def _earliest(conn: RawConnection, topic: str) -> int:
    from kio.schema.list_offsets.v7.request import (
        ListOffsetsPartition,
        ListOffsetsTopic,
    )

    response = conn.request(ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=(
        ListOffsetsTopic(name=topic, partitions=(
            ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-2),)),))
    part = response.topics[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return int(part.offset)


def _fetch(conn: RawConnection, topic: str, offset: int) -> Any:
    from kio.schema.fetch.v11.request import FetchPartition, FetchTopic

    response = conn.request(
        ApiKey.FETCH, 11, max_wait=datetime.timedelta(0), min_bytes=0, forgotten_topics_data=(),
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),)),))
    return response.responses[0].partitions[0]


@pytest.mark.broker_settings({"log.segment.bytes": "1024"})
def test_delete_records_on_the_wire_and_after_kill_9(broker) -> None:
    create_topic(broker.bootstrap, "dr")
    create_topic(broker.bootstrap, "dr-compact", config={"cleanup.policy": "compact"})
    produce_confluent(broker.bootstrap, "dr", [b"x" * 50] * 40,
                      extra={"linger.ms": 0, "batch.num.messages": 1})
    produce_confluent(broker.bootstrap, "dr-compact", [b"v"], keys=[b"k"])
    host, port = broker.bootstrap.split(":")
    conn = RawConnection(host, int(port))
    try:
        hwm = _fetch(conn, "dr", 0).high_watermark
        assert hwm > 12
        got = _delete(conn, "dr", {0: 12, 7: 1})
        assert (got[0].error_code, got[0].low_watermark) == (ErrorCode.none, 12)
        assert got[7].error_code == ErrorCode.unknown_topic_or_partition
        assert _earliest(conn, "dr") == 12
        below = _fetch(conn, "dr", 11)
        assert below.error_code == ErrorCode.offset_out_of_range
        # As Kafka 4.4 answers (conformance case fetch.offsets): a failed read tells no
        # offsets; the consumer finds the new start with ListOffsets (_earliest above).
        assert below.log_start_offset == -1
        at = _fetch(conn, "dr", 12)
        assert at.error_code == ErrorCode.none and 12 in offsets_of(at.records)
        beyond = _delete(conn, "dr", {0: hwm + 1}, version=0)[0]
        assert beyond.error_code == ErrorCode.offset_out_of_range
        compacted = _delete(conn, "dr-compact", {0: 1})[0]
        assert compacted.error_code == ErrorCode.policy_violation
    finally:
        conn.close()

    broker.restart()  # kill -9
    conn = RawConnection(host, int(port))
    try:
        assert _earliest(conn, "dr") == 12
        assert _fetch(conn, "dr", 11).error_code == ErrorCode.offset_out_of_range
        # -1: everything below the high watermark.
        everything = _delete(conn, "dr", {0: -1})[0]
        assert (everything.error_code, everything.low_watermark) == (ErrorCode.none, hwm)
        assert _earliest(conn, "dr") == hwm
    finally:
        conn.close()
