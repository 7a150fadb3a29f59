from __future__ import annotations

from dataclasses import replace

import pytest

from exactly.log import LogConfig
from exactly.log.errors import OffsetOutOfRangeError
from exactly.protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)
from tests.helpers.log.log_helpers import batch, offsets_of


def read_all(plog) -> list[int]:
    out: list[int] = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        offs = offsets_of(plog.read(offset, 1 << 20))
        out.extend(o for o in offs if o >= offset)
        offset = offs[-1] + 1
    return out


def test_roll_by_size(open_log, tmp_path):
    plog = open_log(LogConfig(segment_bytes=1000))
    one = batch(1, value_size=200)
    for _ in range(10):
        plog.append(one)
    per_segment = 1000 // len(one)
    assert len(plog.segments) == -(-10 // per_segment)
    assert all(s.size <= 1000 for s in plog.segments)
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert names[0] == "00000000000000000000.log"
    assert names[1] == f"{per_segment:020d}.log"
    assert (tmp_path / "t-0" / f"{per_segment:020d}.index").exists()
    assert (tmp_path / "t-0" / f"{per_segment:020d}.timeindex").exists()
    assert read_all(plog) == list(range(10))


def test_roll_by_time_with_record_timestamps(open_log, clock):
    plog = open_log(LogConfig(segment_ms=60_000))
    plog.append(batch(1, ts=clock.ms))
    plog.append(batch(1, ts=clock.ms + 59_999))
    assert len(plog.segments) == 1
    plog.append(batch(1, ts=clock.ms + 60_000))
    assert len(plog.segments) == 2
    assert plog.active_segment.base_offset == 2


def test_roll_by_time_without_timestamps_uses_the_clock(open_log, clock):
    plog = open_log(LogConfig(segment_ms=60_000))
    plog.append(batch(1, ts=-1))
    clock.advance_ms(30_000)
    plog.append(batch(1, ts=-1))
    assert len(plog.segments) == 1
    clock.advance_ms(30_000)
    plog.append(batch(1, ts=-1))
    assert len(plog.segments) == 2


def test_roll_when_index_full(open_log):
    plog = open_log(LogConfig(index_interval_bytes=0, segment_index_bytes=8 * 3))
    for _ in range(7):
        plog.append(batch(1))
    assert [s.base_offset for s in plog.segments] == [0, 3, 6]


def test_empty_segment_never_rolls(open_log, clock):
    plog = open_log(LogConfig(segment_ms=1))
    clock.advance_ms(10_000)
    plog.append(batch(1, ts=clock.ms))
    assert len(plog.segments) == 1


def test_retention_by_time(open_log, clock):
    plog = open_log(LogConfig(segment_bytes=300, retention_ms=10_000))
    t0 = clock.ms
    for i in range(6):
        plog.append(batch(1, ts=t0 + i * 1000, value_size=150))
    assert len(plog.segments) == 6
    assert plog.apply_retention(t0 + 10_000) == 0
    # segments 0, 1, 2 hold timestamps t0, t0+1s, t0+2s
    assert plog.apply_retention(t0 + 12_001) == 3
    assert plog.log_start_offset == 3
    assert plog.segments[0].base_offset == 3
    assert not plog.segment_file(0).exists()
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(2, 100)
    assert read_all(plog) == [3, 4, 5]
    # the active segment is never deleted
    assert plog.apply_retention(t0 + 10**9) == 2
    assert len(plog.segments) == 1 and plog.log_start_offset == 5
    assert plog.append(batch(1, ts=t0)).base_offset == 6


def test_retention_by_bytes(open_log):
    plog = open_log(LogConfig(segment_bytes=300, retention_bytes=700, retention_ms=-1))
    for _ in range(6):
        plog.append(batch(1, value_size=150))
    seg_size = plog.segments[0].size
    total = plog.size_bytes
    deleted = plog.apply_retention(0)
    # like Kafka: delete whole segments while what stays is still at least retention.bytes
    assert deleted == (total - 700) // seg_size == 2
    assert plog.size_bytes >= 700 > plog.size_bytes - seg_size
    assert plog.log_start_offset == deleted


def test_retention_disabled_for_compact(open_log):
    plog = open_log(LogConfig(segment_bytes=300, retention_bytes=0, cleanup_policy="compact"))
    for _ in range(4):
        plog.append(batch(1, value_size=150))
    assert plog.apply_retention(10**15) == 0


def test_retention_removes_old_snapshots(open_log):
    plog = open_log(LogConfig(segment_bytes=300, retention_bytes=0))
    for seq in range(5):
        plog.append(batch(1, pid=1, epoch=0, seq=seq, value_size=150))
    plog.apply_retention(0)
    assert all(o >= plog.log_start_offset for o in plog.producer_state.snapshot_offsets())


@pytest.mark.parametrize("codec", [0, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4,
                                   COMPRESSION_ZSTD])
def test_offset_for_timestamp_exact_record(open_log, codec):
    plog = open_log(LogConfig(index_interval_bytes=200, segment_bytes=2000))
    # 20 batches of 5 records, timestamps 100, 110, ..., increasing by 10 per record
    for b in range(20):
        stamps = [1000 + (b * 5 + i) * 10 for i in range(5)]
        plog.append(batch(5, ts=stamps[0], timestamps=stamps, compression=codec, value_size=30))
    assert len(plog.segments) > 1
    assert plog.offset_for_timestamp(0) == (0, 1000)
    assert plog.offset_for_timestamp(1000) == (0, 1000)
    assert plog.offset_for_timestamp(1001) == (1, 1010)
    assert plog.offset_for_timestamp(1000 + 37 * 10) == (37, 1370)
    assert plog.offset_for_timestamp(1000 + 37 * 10 - 5) == (37, 1370)
    assert plog.offset_for_timestamp(1000 + 99 * 10) == (99, 1990)
    assert plog.offset_for_timestamp(1991) is None
    for off in range(100):
        assert plog.offset_for_timestamp(1000 + off * 10) == (off, 1000 + off * 10)


def test_offset_for_timestamp_out_of_order_timestamps(open_log):
    plog = open_log(LogConfig(index_interval_bytes=0))
    plog.append(batch(2, timestamps=[500, 100]))
    plog.append(batch(2, timestamps=[200, 300]))
    plog.append(batch(2, timestamps=[900, 400]))
    assert plog.offset_for_timestamp(150) == (0, 500)
    assert plog.offset_for_timestamp(600) == (4, 900)
    assert plog.offset_for_timestamp(901) is None


def test_max_timestamp_offset(open_log):
    plog = open_log(LogConfig(segment_bytes=300, index_interval_bytes=0))
    plog.append(batch(2, timestamps=[10, 20], value_size=100))
    plog.append(batch(3, timestamps=[30, 990, 40], compression=COMPRESSION_ZSTD, value_size=100))
    plog.append(batch(2, timestamps=[50, 60], value_size=100))
    assert len(plog.segments) > 1
    assert plog.max_timestamp_offset() == (3, 990)


def test_update_config_applies_to_next_roll(open_log):
    config = LogConfig()
    plog = open_log(config)
    plog.append(batch(1, value_size=200))
    plog.update_config(replace(config, segment_bytes=300))
    plog.append(batch(1, value_size=200))
    assert len(plog.segments) == 2
