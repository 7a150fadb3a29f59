"""Corruption found when a log reads from disk (issue 14, item 5), on real files: recovery after a
crash names the file, offset, position and reason of the batch it cuts at; a read checks the
CRCs of bytes loaded from disk once, serves the good batches before a bad one and refuses to
start at a bad one, which is logged and counted once; bytes this process wrote are never
checked again."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from exactly.log import LogConfig, PartitionLog
from exactly.log.cleaner import LogCleaner
from exactly.log.config import CleanerConfig
from exactly.log.errors import CorruptRecordError
from exactly.log.segment import segment_name
from exactly.protocol.records import HEADER_SIZE, Record, build_batch, iter_batches
from tests.helpers.log.log_helpers import FakeClock, batch, offsets_of

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100)


def fill(plog: PartitionLog, n: int) -> None:
    for i in range(n):
        plog.append(batch(2, value_size=40, ts=1000 + i))


def log_file(tmp_path: Path, base: int) -> Path:
    return tmp_path / "t-0" / segment_name(base, ".log")


def flip(path: Path, position: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))


def crash(plog: PartitionLog) -> None:
    """What kill -9 leaves: the data and lazily written index entries, no clean-stop marker."""
    plog.active_segment.write_indexes()
    plog.delete()


# -- recovery after a crash ---------------------------------------------------------------------


@pytest.mark.parametrize(("damage", "reason"), [
    ("payload", "record batch CRC mismatch: stored"),
    ("length", "batch length -2147483499 is out of range (below the header's 49)"),
    ("magic", "magic 3, not 2: not a record batch"),
    ("torn", "runs past the end of the segment"),
    ("torn header", "partial batch header at the end of the segment"),
])
def test_recovery_names_the_file_offset_position_and_reason(
        open_log, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str,
        reason: str) -> None:
    plog = open_log()
    fill(plog, 5)
    crash(plog)
    path = log_file(tmp_path, 0)
    third = list(iter_batches(path.read_bytes()))[2]
    if damage.startswith("torn"):
        path.write_bytes(path.read_bytes()[: third.position + (30 if "header" in damage else 100)])
    else:
        at, mask = {"payload": (HEADER_SIZE + 7, 0x01), "length": (8, 0x80),
                    "magic": (16, 0x01)}[damage]
        flip(path, third.position + at, mask)  # 0x80: the length's sign bit
    with caplog.at_level(logging.WARNING, logger="exactly.log.loader"):
        plog = open_log()
    assert plog.log_end_offset == 4
    (line,) = [r.getMessage() for r in caplog.records if "event=log_truncated" in r.getMessage()]
    assert line.startswith(f"event=log_truncated file={path} offset=4 position={third.position} ")
    assert reason in line


# -- reads of segments loaded from disk ---------------------------------------------------------


def reopened_with_a_bad_batch(open_log, tmp_path: Path, mask_at: int) -> tuple[PartitionLog, int,
                                                                             Path, int]:
    """A clean-stopped log of several segments whose second segment's second batch has a byte
    flipped at `mask_at` bytes into it; returns the reopened log, the bad batch's offset, file
    and position."""
    plog = open_log(CONFIG)
    fill(plog, 12)
    plog.close()
    bases = sorted(int(p.stem) for p in (tmp_path / "t-0").glob("*.log"))
    path = log_file(tmp_path, bases[1])
    bad = list(iter_batches(path.read_bytes()))[1]
    flip(path, bad.position + mask_at, 0x10)
    return open_log(CONFIG), bad.base_offset, path, bad.position


def test_a_read_serves_the_good_batches_before_a_bad_one(
        open_log, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    plog, bad_offset, path, position = reopened_with_a_bad_batch(open_log, tmp_path,
                                                                 HEADER_SIZE + 20)
    segment_base = int(path.stem)
    assert offsets_of(plog.read(segment_base, 1 << 20)) == list(range(segment_base, bad_offset))
    with caplog.at_level(logging.ERROR, logger="exactly.log.checked_reads"):
        for _ in range(3):
            with pytest.raises(CorruptRecordError, match=f"position {position} "
                                                         f"\\(offset {bad_offset}\\) is corrupt"):
                plog.read(bad_offset, 1 << 20)
    assert plog.corrupt_batches.count == 1  # found three times, counted once
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"event=corrupt_batch file={path} offset={bad_offset} "
                           f"position={position} ")
    assert "record batch CRC mismatch" in line
    # The other segments are served in full.
    assert offsets_of(plog.read(0, 1 << 20)) == list(range(segment_base))
    after = bad_offset + 2
    assert offsets_of(plog.read(after, 1 << 20))[0] == after


def test_a_bad_batch_length_ends_the_read_before_it(open_log, tmp_path: Path) -> None:
    plog, bad_offset, path, _ = reopened_with_a_bad_batch(open_log, tmp_path, 9)
    segment_base = int(path.stem)
    assert offsets_of(plog.read(segment_base, 1 << 20)) == list(range(segment_base, bad_offset))
    with pytest.raises(CorruptRecordError):
        plog.read(bad_offset, 1 << 20)
    assert plog.corrupt_batches.count == 1


def test_each_byte_from_disk_is_checked_once(open_log, tmp_path: Path) -> None:
    plog = open_log(CONFIG)
    fill(plog, 12)
    plog.close()
    plog = open_log(CONFIG)
    first = plog.segments[0]
    assert first.unchecked.ranges == [(0, first.size)]
    plog.read(2, 161)  # one batch: [161, 322)
    assert first.unchecked.ranges == [(0, 161), (322, first.size)]
    plog.read(0, 1 << 20)
    assert first.unchecked.ranges == []
    # What this process appends was validated at append: never on the list.
    active = plog.active_segment
    before = active.size
    plog.append(batch(2))
    assert plog.active_segment is active and active.size > before
    assert active.unchecked.ranges == [(0, before)]
    fresh = open_log(CONFIG, name="u-0")
    fill(fresh, 12)
    assert all(not seg.unchecked for seg in fresh.segments)


def test_a_cleaned_segment_from_unchecked_bytes_is_checked_on_read(
        tmp_path: Path, clock: FakeClock) -> None:
    """The cleaner copies kept batches byte for byte: one it copied from bytes nobody checked
    is checked by the first read of the cleaned segment."""
    config = LogConfig(segment_bytes=400, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    directory = tmp_path / "c-0"
    plog = PartitionLog.open(directory, config, clock=clock)
    for i in range(30):
        plog.append(build_batch([Record(f"k{i}".encode(), f"value {i:04d}".encode())],
                                timestamp=clock.ms))
    plog.close()
    path = directory / segment_name(0, ".log")
    bad = list(iter_batches(path.read_bytes()))[1]
    flip(path, bad.end - 2)  # in the value: the record still decodes, its CRC does not match
    plog = PartitionLog.open(directory, config, clock=clock)
    cleaner = LogCleaner(tmp_path, lambda: [plog], CleanerConfig(), clock=clock)
    assert cleaner.clean_once(clock.ms) is not None
    assert plog.segments[0].unchecked
    assert offsets_of(plog.read(0, 1 << 20)) == [0]
    with pytest.raises(CorruptRecordError):
        plog.read(1, 1 << 20)
    plog.close()
