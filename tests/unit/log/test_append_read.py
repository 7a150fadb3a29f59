from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from exactly.log import AppendResult, LogConfig
from exactly.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)
from exactly.protocol.records import RecordBatchHeader, iter_batches
from tests.helpers.log.log_helpers import batch, offsets_of, values_of


def test_new_log_is_empty(open_log):
    plog = open_log()
    assert (plog.topic, plog.partition) == ("t", 0)
    assert plog.log_start_offset == plog.log_end_offset == plog.high_watermark == 0
    assert plog.read(0, 1 << 20) == b""
    assert plog.offset_for_timestamp(0) is None
    assert plog.max_timestamp_offset() is None


def test_append_assigns_offsets_and_read_returns_them(open_log):
    plog = open_log()
    r1 = plog.append(batch(3))
    r2 = plog.append(batch(2))
    assert r1 == AppendResult(0, 2, -1, 0, False)
    assert (r2.base_offset, r2.last_offset) == (3, 4)
    assert plog.log_end_offset == plog.high_watermark == 5
    data = plog.read(0, 1 << 20)
    assert offsets_of(data) == [0, 1, 2, 3, 4]
    assert plog.read(5, 1 << 20) == b""


def test_batches_stored_byte_for_byte(open_log, tmp_path):
    plog = open_log()
    raw = batch(4, value_size=50)
    plog.append(batch(1))
    plog.append(raw)
    stored = plog.read(1, 1 << 20)
    assert stored[8:12] == raw[8:12]
    assert stored[16:] == raw[16:]  # everything but baseOffset and the leader epoch, CRC included
    h = RecordBatchHeader(stored)
    assert h.base_offset == 1 and h.partition_leader_epoch == 0
    h.validate()
    on_disk = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    assert on_disk.endswith(stored)


def test_read_from_the_middle_of_a_batch_starts_at_the_batch(open_log):
    plog = open_log()
    plog.append(batch(5))
    plog.append(batch(5))
    data = plog.read(7, 1 << 20)
    assert RecordBatchHeader(data).base_offset == 5
    assert offsets_of(data) == list(range(5, 10))


def test_multi_batch_request(open_log):
    plog = open_log()
    r = plog.append(batch(2) + batch(3) + batch(1))
    assert (r.base_offset, r.last_offset) == (0, 5)
    assert [h.base_offset for h in iter_batches(plog.read(0, 1 << 20))] == [0, 2, 5]


def test_read_max_bytes_whole_batches_and_at_least_one(open_log):
    plog = open_log(LogConfig(index_interval_bytes=0))
    one = batch(1, value_size=100)
    for _ in range(10):
        plog.append(one)
    size = len(one)
    data = plog.read(0, size * 3 + size // 2)
    assert len(data) == size * 3
    assert offsets_of(data) == [0, 1, 2]
    # KIP-74: the first batch comes whole even when it is bigger than max_bytes
    data = plog.read(4, 10)
    assert len(data) == size and offsets_of(data) == [4]
    data = plog.read(4, 0)
    assert offsets_of(data) == [4]


def test_read_respects_max_offset(open_log):
    plog = open_log()
    for _ in range(4):
        plog.append(batch(2))
    assert offsets_of(plog.read(0, 1 << 20, max_offset=4)) == [0, 1, 2, 3]
    assert offsets_of(plog.read(0, 1 << 20, max_offset=5)) == [0, 1, 2, 3, 4, 5]
    assert plog.read(4, 1 << 20, max_offset=4) == b""
    assert plog.read(0, 1 << 20, max_offset=0) == b""


def test_read_out_of_range(open_log):
    plog = open_log()
    plog.append(batch(2))
    with pytest.raises(OffsetOutOfRangeError) as exc:
        plog.read(3, 100)
    assert exc.value.error_code == ErrorCode.offset_out_of_range
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(-1, 100)


def test_read_with_sparse_index_and_many_batches(open_log):
    plog = open_log(LogConfig(index_interval_bytes=1000))
    for i in range(200):
        plog.append(batch(1 + i % 3, value_size=20))
    expected = offsets_of(plog.read(0, 1 << 30))
    assert expected == list(range(plog.log_end_offset))
    for target in (0, 1, 57, 150, plog.log_end_offset - 1):
        data = plog.read(target, 700)
        offs = offsets_of(data)
        assert offs[0] <= target <= offs[-1] or offs[0] == target
        assert target in offs
        assert len(data) <= 700 or len(list(iter_batches(data))) == 1


def test_corrupt_crc_rejected(open_log):
    plog = open_log()
    bad = bytearray(batch(2))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError) as exc:
        plog.append(bytes(bad))
    assert exc.value.error_code == ErrorCode.corrupt_message
    assert plog.log_end_offset == 0


def test_truncated_and_garbage_requests_rejected(open_log):
    plog = open_log()
    good = batch(2)
    for bad in (good[:-3], good[:30], good + b"\x00" * 10, b"\x01" * 80):
        with pytest.raises(CorruptRecordError):
            plog.append(bad)
    with pytest.raises(InvalidRecordError):
        plog.append(b"")
    assert plog.log_end_offset == 0
    assert plog.active_segment.size == 0


def test_wrong_magic_is_invalid_record(open_log):
    plog = open_log()
    bad = bytearray(batch(1))
    bad[16] = 1
    with pytest.raises(InvalidRecordError) as exc:
        plog.append(bytes(bad))
    assert exc.value.error_code == ErrorCode.invalid_record


def test_too_large_batch(open_log):
    plog = open_log(LogConfig(max_message_bytes=500))
    plog.append(batch(1, value_size=100))
    with pytest.raises(RecordTooLargeError) as exc:
        plog.append(batch(1, value_size=600))
    assert exc.value.error_code == ErrorCode.message_too_large
    assert "max.message.bytes" in str(exc.value)
    assert plog.log_end_offset == 1


def test_request_larger_than_segment(open_log):
    plog = open_log(LogConfig(segment_bytes=300))
    with pytest.raises(RecordListTooLargeError) as exc:
        plog.append(batch(1, value_size=100) * 4)
    assert exc.value.error_code == ErrorCode.record_list_too_large


def test_all_or_nothing_second_batch_bad(open_log, tmp_path):
    plog = open_log()
    plog.append(batch(1))
    before = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    bad = bytearray(batch(2))
    bad[-2] ^= 0x55
    with pytest.raises(CorruptRecordError):
        plog.append(batch(3) + bytes(bad))
    assert plog.log_end_offset == 1
    assert (tmp_path / "t-0" / "00000000000000000000.log").read_bytes() == before
    assert plog.append(batch(1)).base_offset == 1


def test_errors_share_base_class():
    assert issubclass(CorruptRecordError, LogError)
    assert issubclass(OffsetOutOfRangeError, LogError)


def test_log_append_time(open_log, clock):
    plog = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    result = plog.append(batch(3, ts=5), now_ms=123456)
    assert result.log_append_time == 123456
    h = RecordBatchHeader(plog.read(0, 1 << 20))
    h.validate()
    assert h.max_timestamp == 123456 and h.attributes & 0x08
    assert plog.offset_for_timestamp(100000) == (0, 123456)
    assert values_of(plog.read(0, 1 << 20)) == values_of(batch(3, ts=5))


def test_flush_advances_flushed_offset(open_log):
    plog = open_log()
    plog.append(batch(2))
    plog.flush()
    assert plog.flushed_offset == 2


def test_control_batches_only_when_allowed(open_log):
    from exactly.protocol.records import Record, build_batch

    plog = open_log()
    marker = build_batch([Record(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], timestamp=1,
                         producer_id=7, producer_epoch=0, control=True, transactional=True)
    with pytest.raises(InvalidRecordError, match="control"):
        plog.append(marker)
    assert plog.log_end_offset == 0
    assert plog.append(marker, allow_control=True).base_offset == 0
    entry = plog.producer_state.last_entry(7)
    assert entry is not None and entry.epoch == 0 and not entry.batches


def test_read_crosses_to_next_segment_when_offset_is_past_a_segment(open_log):
    plog = open_log(LogConfig(segment_bytes=300))
    for _ in range(4):
        plog.append(batch(1, value_size=150))
    assert len(plog.segments) == 4
    for off in range(4):
        assert offsets_of(plog.read(off, 1 << 20)) == [off]
