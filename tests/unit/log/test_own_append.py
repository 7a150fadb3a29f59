"""The trusted append path (issue 19): `PartitionLog.append_own` takes only batches the broker
built itself (OwnBatch: the coordinators' records, markers) and skips parsing them again and
checking their CRC. It must leave the log exactly as the checked `append` does, and nothing a
client sends may take it."""

from __future__ import annotations

import pytest

from exactly.log import LogConfig
from exactly.log.errors import RecordListTooLargeError, RecordTooLargeError
from exactly.log.markers import build_marker
from exactly.protocol.records import (
    COMPRESSION_NONE,
    OwnBatch,
    Record,
    RecordBatchHeader,
    build_batch,
    build_own_batch,
    decode_records,
    rebuild_batch,
)

KEY = b"\x00\x01\x00\x05txn-1"


def _own_batches(ts: int) -> list[OwnBatch]:
    """What the coordinators write: records with and without values (tombstones), several in
    one batch, a transactional batch with a producer id, and markers."""
    return [
        build_own_batch([Record(KEY, b"ongoing" * 9)], timestamp=ts),
        build_own_batch([Record(KEY, None)], timestamp=ts + 1),
        build_own_batch([Record(KEY, b"a"), Record(b"k2", b"b", timestamp=ts + 7)], timestamp=ts),
        build_own_batch([Record(b"offset-key", b"x" * 300)], timestamp=ts, producer_id=7,
                        producer_epoch=2, base_sequence=0, transactional=True),
        build_own_batch([Record(b"offset-key", b"y")], timestamp=ts, producer_id=9,
                        producer_epoch=0, base_sequence=0, transactional=True),
        OwnBatch.of(build_marker(7, 2, commit=True, coordinator_epoch=3, timestamp=ts + 2)),
        OwnBatch.of(build_marker(9, 0, commit=False, coordinator_epoch=0, timestamp=ts + 3)),
    ]


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_append_own_leaves_the_log_the_checked_append_leaves(open_log, clock,
                                                            timestamp_type: str) -> None:
    config = LogConfig(message_timestamp_type=timestamp_type)
    checked, trusted = open_log(config, "checked-0"), open_log(config, "trusted-0")
    for own in _own_batches(clock.ms):
        marker = own.header.is_control
        a = checked.append(own.data, now_ms=clock.ms, allow_control=marker)
        b = trusted.append_own(own, now_ms=clock.ms)
        assert a == b
        clock.advance_ms(5)
    assert trusted.read(0, 1 << 20) == checked.read(0, 1 << 20)
    assert (trusted.log_end_offset, trusted.high_watermark, trusted.last_stable_offset) == (
        checked.log_end_offset, checked.high_watermark, checked.last_stable_offset)
    assert trusted.aborted_transactions(0, 100) == checked.aborted_transactions(0, 100) == [(9, 5)]
    assert [(p.producer_id, p.epoch, p.coordinator_epoch, p.last_sequence)
            for p in trusted.producers()] == [(p.producer_id, p.epoch, p.coordinator_epoch,
                                               p.last_sequence) for p in checked.producers()]
    assert trusted.max_timestamp_offset() == checked.max_timestamp_offset()


def test_append_marker_writes_what_the_checked_path_writes(open_log, clock) -> None:
    checked, trusted = open_log(name="checked-0"), open_log(name="trusted-0")
    for plog in (checked, trusted):
        plog.append(build_batch([Record(b"k", b"v")], timestamp=clock.ms, producer_id=4,
                                producer_epoch=0, base_sequence=0, transactional=True))
    checked.append(build_marker(4, 0, commit=True, coordinator_epoch=1, timestamp=clock.ms),
                   now_ms=clock.ms, allow_control=True)
    trusted.append_marker(4, 0, commit=True, coordinator_epoch=1, now_ms=clock.ms)
    assert trusted.read(0, 1 << 20) == checked.read(0, 1 << 20)
    assert trusted.last_stable_offset == checked.last_stable_offset == 2


@pytest.mark.parametrize("data", [
    build_batch([Record(b"k", b"v")], timestamp=1),
    bytearray(build_batch([Record(b"k", b"v")], timestamp=1)),
    memoryview(build_batch([Record(b"k", b"v")], timestamp=1)),
    (build_batch([Record(b"k", b"v")], timestamp=1),),
])
def test_append_own_refuses_anything_but_an_own_batch(open_log, data: object) -> None:
    """A client's batch arrives as bytes or a view of the request: append_own never takes it."""
    plog = open_log()
    with pytest.raises(TypeError, match="append_own takes an OwnBatch the broker built"):
        plog.append_own(data)  # type: ignore[arg-type]
    assert plog.log_end_offset == 0


def test_append_own_keeps_the_size_limits(open_log) -> None:
    plog = open_log(LogConfig(max_message_bytes=200, segment_bytes=4096))
    with pytest.raises(RecordTooLargeError, match="max.message.bytes=200"):
        plog.append_own(build_own_batch([Record(KEY, b"x" * 300)], timestamp=1))
    plog.update_config(LogConfig(max_message_bytes=1 << 20, segment_bytes=200))
    with pytest.raises(RecordListTooLargeError, match="segment.bytes=200"):
        plog.append_own(build_own_batch([Record(KEY, b"x" * 300)], timestamp=1))
    assert plog.log_end_offset == 0


@pytest.mark.parametrize("records", [
    [Record(KEY, b"v")],
    [Record(KEY, None)],
    [Record(None, b"v" * 200, headers=(("h", b"1"), ("n", None)))],
    [Record(b"a", b"1"), Record(b"b", None, timestamp=5), Record(None, b"3", timestamp=2)],
])
def test_an_uncompressed_batch_is_built_as_before(records: list[Record]) -> None:
    """build_batch encodes uncompressed records in place now; the bytes are those of the
    general encoder (rebuild_batch's, which still goes through compress())."""
    data = build_batch(records, timestamp=10, producer_id=3, producer_epoch=1, base_sequence=4,
                       transactional=True, compression=COMPRESSION_NONE)
    header = RecordBatchHeader(data)
    header.validate()
    assert rebuild_batch(header, decode_records(header)) == data
    own = build_own_batch(records, timestamp=10, producer_id=3, producer_epoch=1,
                          base_sequence=4, transactional=True)
    assert own.data == data and own.header.crc == header.crc
