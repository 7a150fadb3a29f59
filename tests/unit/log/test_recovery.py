from __future__ import annotations

import os
from pathlib import Path

from exactly.log import LogConfig
from tests.helpers.log.log_helpers import batch, offsets_of

PID = 99


def seg_file(tmp_path: Path, base: int, suffix: str) -> Path:
    return tmp_path / "t-0" / f"{base:020d}{suffix}"


def crash(plog) -> None:
    """Drop the log like kill -9 would: no snapshot, no clean-shutdown marker."""
    plog.active_segment.write_indexes()
    plog.delete()


def fill(plog, n: int = 10, **kw) -> list[int]:
    sizes = []
    for i in range(n):
        data = batch(2, value_size=40, ts=1000 + i, **kw)
        plog.append(data)
        sizes.append(len(data))
    return sizes


def test_clean_restart_keeps_everything(open_log, tmp_path):
    plog = open_log(LogConfig(segment_bytes=500, index_interval_bytes=100))
    fill(plog)
    segments = len(plog.segments)
    plog.close()
    plog = open_log(LogConfig(segment_bytes=500, index_interval_bytes=100))
    assert plog.log_end_offset == 20 and len(plog.segments) == segments
    assert offsets_of(plog.read(19, 1 << 20)) == [18, 19]
    assert plog.append(batch(1)).base_offset == 20


def test_torn_tail_partial_batch_is_truncated(open_log, tmp_path):
    plog = open_log()
    sizes = fill(plog, 5)
    crash(plog)
    log_file = seg_file(tmp_path, 0, ".log")
    full = log_file.read_bytes()
    torn = batch(3, value_size=100)
    log_file.write_bytes(full + torn[:-7])  # half-written last batch
    plog = open_log()
    assert plog.log_end_offset == 10
    assert log_file.stat().st_size == sum(sizes)
    assert plog.append(batch(1)).base_offset == 10


def test_garbage_tail_is_truncated(open_log, tmp_path):
    plog = open_log()
    sizes = fill(plog, 5)
    crash(plog)
    log_file = seg_file(tmp_path, 0, ".log")
    with open(log_file, "ab") as f:
        f.write(os.urandom(3000))
    plog = open_log()
    assert plog.log_end_offset == 10
    assert log_file.stat().st_size == sum(sizes)


def test_bad_crc_in_last_batch_is_truncated(open_log, tmp_path):
    plog = open_log()
    sizes = fill(plog, 5)
    crash(plog)
    log_file = seg_file(tmp_path, 0, ".log")
    data = bytearray(log_file.read_bytes())
    data[-5] ^= 0xFF
    log_file.write_bytes(bytes(data))
    plog = open_log()
    assert plog.log_end_offset == 8
    assert log_file.stat().st_size == sum(sizes[:4])
    assert offsets_of(plog.read(0, 1 << 20)) == list(range(8))


def test_truncation_rebuilds_producer_state_and_drops_later_snapshot(open_log, tmp_path):
    plog = open_log()
    for seq in range(4):
        plog.append(batch(1, pid=PID, epoch=0, seq=seq))
    plog.close()  # snapshot at offset 4
    plog = open_log()
    crash(plog)
    log_file = seg_file(tmp_path, 0, ".log")
    log_file.write_bytes(log_file.read_bytes()[:-3])  # lose part of the batch with seq 3
    plog = open_log()
    assert plog.log_end_offset == 3
    assert not (tmp_path / "t-0" / f"{4:020d}.snapshot").exists()
    entry = plog.producer_state.last_entry(PID)
    assert entry is not None and entry.last_sequence == 2
    assert plog.append(batch(1, pid=PID, epoch=0, seq=3)).base_offset == 3


def test_unclean_restart_truncates_torn_active_segment_only(open_log, tmp_path):
    config = LogConfig(segment_bytes=400)
    plog = open_log(config)
    fill(plog, 10)
    bases = [s.base_offset for s in plog.segments]
    end = plog.log_end_offset
    crash(plog)
    active = seg_file(tmp_path, bases[-1], ".log")
    with open(active, "ab") as f:
        f.write(b"\x00" * 50)
    plog = open_log(config)
    assert [s.base_offset for s in plog.segments] == bases
    assert plog.log_end_offset == end


def test_deleted_indexes_are_rebuilt(open_log, tmp_path):
    config = LogConfig(segment_bytes=600, index_interval_bytes=100)
    plog = open_log(config)
    fill(plog, 12)
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) >= 3
    plog.close()
    originals = {p: p.read_bytes() for p in (tmp_path / "t-0").glob("*index")}
    for p in originals:
        p.unlink()
    plog = open_log(config)
    assert plog.log_end_offset == 24
    for p, data in originals.items():
        assert p.read_bytes() == data, p.name
    for off in range(24):
        assert off in offsets_of(plog.read(off, 1 << 20))
    assert plog.offset_for_timestamp(1005) == (10, 1005)


def test_corrupt_indexes_are_rebuilt(open_log, tmp_path):
    config = LogConfig(segment_bytes=600, index_interval_bytes=100)
    plog = open_log(config)
    fill(plog, 12)
    plog.close()
    idx = seg_file(tmp_path, 0, ".index")
    tidx = seg_file(tmp_path, 0, ".timeindex")
    good_idx, good_tidx = idx.read_bytes(), tidx.read_bytes()
    idx.write_bytes(b"\xff" * len(good_idx))  # positions past the end of the log
    tidx.write_bytes(good_tidx[:-5])  # a partial entry
    plog = open_log(config)
    assert idx.read_bytes() == good_idx
    assert tidx.read_bytes() == good_tidx
    assert offsets_of(plog.read(0, 1 << 20))[:2] == [0, 1]
    assert plog.offset_for_timestamp(1001) == (2, 1001)


def test_index_pointing_at_wrong_batch_is_rebuilt(open_log, tmp_path):
    config = LogConfig(index_interval_bytes=0)
    plog = open_log(config)
    fill(plog, 6)
    plog.close()
    idx = seg_file(tmp_path, 0, ".index")
    good = idx.read_bytes()
    entries = bytearray(good)
    entries[-8:-4] = (7).to_bytes(4, "big")  # last entry claims offset 7 lives at its position
    idx.write_bytes(bytes(entries))
    plog = open_log(config)
    assert idx.read_bytes() == good
    assert offsets_of(plog.read(10, 1 << 20)) == [10, 11]


def test_corruption_in_older_segment_drops_what_follows(open_log, tmp_path):
    config = LogConfig(segment_bytes=400)
    plog = open_log(config)
    fill(plog, 10)
    bases = [s.base_offset for s in plog.segments]
    crash(plog)
    first = seg_file(tmp_path, 0, ".log")
    data = bytearray(first.read_bytes())
    data[-3] ^= 0x01  # bit flip in the last batch of the first segment
    first.write_bytes(bytes(data))
    seg_file(tmp_path, 0, ".index").unlink()  # its index is gone too, so it gets validated
    plog = open_log(config)
    assert [s.base_offset for s in plog.segments] == [0]
    assert plog.log_end_offset == bases[1] - 2
    assert not seg_file(tmp_path, bases[1], ".log").exists()


def test_empty_file_after_crash(open_log, tmp_path):
    plog = open_log()
    crash(plog)
    plog = open_log()
    assert plog.log_end_offset == 0
    assert plog.append(batch(2)).last_offset == 1
