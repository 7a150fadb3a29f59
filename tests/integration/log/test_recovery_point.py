"""The recovery point (issue 13, item 4): after a crash only the log after a partition's
recovery point (`recovery-point-offset-checkpoint`) is validated, batch by batch with CRCs; what
lies below it is trusted, as Apache Kafka trusts it. The cost of a start is counted in the bytes
recovery validated (`PartitionLog.validated_bytes_at_open`), never in time.

A crash is simulated in-process (`crash`) by dropping the log as kill -9 would: no snapshot, no
clean-shutdown marker, and the index entries kept in memory are lost. The kill -9 test at the end
kills a real writer process.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from exactly.log import LogConfig, LogManager, PartitionLog
from exactly.log.checkpoints import RECOVERY_POINT_CHECKPOINT, read_checkpoint
from exactly.log.errors import CorruptRecordError
from exactly.log.markers import parse_marker
from exactly.protocol.records import (
    HEADER_SIZE,
    RecordBatchHeader,
    iter_batches,
)
from tests.helpers.log.log_helpers import batch, offsets_of

PID = 7


def append_batches(plog: PartitionLog, count: int) -> None:
    """`count` idempotent batches of 2 records (about 2 KB each) of producer PID."""
    for _ in range(count):
        entry = plog.producer_state.last_entry(PID)
        seq = 0 if entry is None else entry.last_sequence + 1
        plog.append(batch(2, pid=PID, epoch=0, seq=seq, value_size=1000,
                          ts=1000 + plog.log_end_offset))


def crash(plog: PartitionLog) -> None:
    """Drop the log as kill -9 would: the index entries still in memory are lost."""
    active = plog.active_segment
    written = {path: path.stat().st_size for path in (active.index.path, active.time_index.path)}
    plog.delete()  # closes the files; closing writes the pending index entries...
    for path, size in written.items():
        os.truncate(path, size)  # ...which a killed process would not have written


def read_all(plog: PartitionLog) -> list[int]:
    offset, seen = plog.log_start_offset, []
    while offset < plog.log_end_offset:
        offsets = offsets_of(plog.read(offset, 1 << 20))
        seen.extend(offsets)
        offset = offsets[-1] + 1
    return seen


def batch_positions(log_file: Path) -> list[tuple[int, int]]:
    """(position, base offset) of every whole batch in a segment file, read independently of the
    log (a torn last batch is left out)."""
    data = log_file.read_bytes()
    found, position = [], 0
    while position + HEADER_SIZE <= len(data):
        header = RecordBatchHeader(data, position)
        if header.end > len(data):
            break
        found.append((position, header.base_offset))
        position = header.end
    return found


def boundaries(log_file: Path) -> dict[int, int]:
    """Offset -> position of every batch boundary: each whole batch's start, and the end of the
    last whole one."""
    data = log_file.read_bytes()
    found = {offset: position for position, offset in batch_positions(log_file)}
    if found:
        last = RecordBatchHeader(data, max(found.values()))
        found[last.next_offset] = last.end
    return found


def segment_state(plog: PartitionLog) -> tuple[object, ...]:
    seg = plog.active_segment
    return (list(seg.index.keys), list(seg.index.values), list(seg.time_index.keys),
            list(seg.time_index.values), seg.size, seg.next_offset, seg.max_timestamp,
            seg.offset_of_max_timestamp, seg.first_timestamp)


def checkpointed_log(directory: Path, *, flushed: int = 2000, tail: int = 20
                     ) -> tuple[int, int, int, int]:
    """A log of one big active segment: `flushed` batches fsynced and checkpointed, then `tail`
    batches appended after the checkpoint, then a crash. Returns (recovery point, its position,
    log end offset, file size)."""
    plog = PartitionLog.open(directory, LogConfig())
    append_batches(plog, flushed)
    plog.flush()
    point = plog.recovery_point()
    position = plog.active_segment.size
    # What the checkpoint relies on is on disk: every index entry kept in memory is written.
    for index in (plog.active_segment.index, plog.active_segment.time_index):
        assert index.path.stat().st_size == index.size_bytes > 0
    append_batches(plog, tail)
    end, size = plog.log_end_offset, plog.active_segment.size
    crash(plog)
    return point, position, end, size


def test_synced_to_only_moves_the_recovery_point_forward(tmp_path: Path) -> None:
    """A sync that ends late (an AIO sync begun before a flush) never takes the point back."""
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    append_batches(plog, 3)
    begun_at = plog.log_end_offset
    append_batches(plog, 2)
    plog.flush()
    assert plog.flushed_offset == plog.log_end_offset == 10
    plog.synced_to(begun_at)
    assert plog.flushed_offset == plog.recovery_point() == 10
    append_batches(plog, 1)
    plog.synced_to(plog.log_end_offset)
    assert plog.flushed_offset == 12
    plog.close()


def test_crash_validates_only_the_batches_after_the_recovery_point(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    point, position, end, size = checkpointed_log(directory)
    assert point == 4000 and end == 4040
    shutil.copytree(directory, tmp_path / "copy-0")

    plog = PartitionLog.open(directory, LogConfig(), recovery_point=point)
    full = PartitionLog.open(tmp_path / "copy-0", LogConfig())  # no recovery point
    try:
        assert plog.validated_bytes_at_open == size - position  # the 20 batches of the tail
        assert plog.validated_bytes_at_open * 50 < size
        assert full.validated_bytes_at_open == size
        assert plog.log_end_offset == end and plog.flushed_offset == point
        assert read_all(plog) == list(range(end))
        entry = plog.producer_state.last_entry(PID)
        assert entry is not None and entry.last_sequence == end - 1
        # The indexes and the segment's state are what a full recovery rebuilds.
        assert segment_state(plog) == segment_state(full)
        assert plog.offset_for_timestamp(1000 + 3001) == full.offset_for_timestamp(1000 + 3001)
        append_batches(plog, 3)
        assert read_all(plog) == list(range(end + 6))
    finally:
        full.delete()
        plog.close()
    plog = PartitionLog.open(directory, LogConfig(), recovery_point=end + 6)
    try:
        assert plog.validated_bytes_at_open == 0  # a clean stop trusts everything
        assert read_all(plog) == list(range(end + 6))
    finally:
        plog.close()


def test_a_second_crash_recovers_from_the_same_point(tmp_path: Path) -> None:
    """Recovery drops the index entries past the recovery point and writes new ones: a crash
    right after it finds consistent files again."""
    directory = tmp_path / "t-0"
    point, position, end, size = checkpointed_log(directory)
    for _ in range(2):
        plog = PartitionLog.open(directory, LogConfig(), recovery_point=point)
        assert plog.validated_bytes_at_open == size - position
        assert plog.log_end_offset == end
        crash(plog)


def test_torn_tail_after_the_recovery_point_is_cut(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    point, position, end, size = checkpointed_log(directory)
    log_file = directory / f"{0:020d}.log"
    torn = batch(3, value_size=500)
    with open(log_file, "ab") as f:
        f.write(torn[:-100])  # a batch half written when the process died
    plog = PartitionLog.open(directory, LogConfig(), recovery_point=point)
    try:
        assert plog.validated_bytes_at_open == size + len(torn) - 100 - position
        assert plog.log_end_offset == end
        assert log_file.stat().st_size == size
        assert read_all(plog) == list(range(end))
        assert plog.append(batch(1)).base_offset == end
    finally:
        plog.close()


def test_bad_crc_after_the_recovery_point_cuts_there(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    point, position, _, size = checkpointed_log(directory)
    log_file = directory / f"{0:020d}.log"
    batches = batch_positions(log_file)
    bad_position, bad_offset = batches[-10]  # a batch of the tail
    assert bad_position > position
    data = bytearray(log_file.read_bytes())
    data[bad_position + 100] ^= 0xFF  # inside its records: only the CRC sees it
    log_file.write_bytes(bytes(data))
    plog = PartitionLog.open(directory, LogConfig(), recovery_point=point)
    try:
        assert plog.validated_bytes_at_open == size - position
        assert plog.log_end_offset == bad_offset
        assert log_file.stat().st_size == bad_position
        entry = plog.producer_state.last_entry(PID)
        assert entry is not None and entry.last_sequence == bad_offset - 1
    finally:
        plog.close()


def test_index_entries_written_past_the_recovery_point_are_dropped(tmp_path: Path) -> None:
    """A checkpoint taken while unflushed batches wait writes their index entries too; recovery
    cuts those batches (a bad CRC here), so their entries go, from memory and from the files."""
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(directory, LogConfig())
    append_batches(plog, 100)
    plog.flush()
    point, below = plog.log_end_offset, plog.active_segment.index.size_bytes
    append_batches(plog, 100)  # appended after the flush, before the checkpoint
    assert plog.recovery_point() == point
    index_file = plog.active_segment.index.path
    assert index_file.stat().st_size > below  # the entries of the unflushed batches are written
    crash(plog)
    log_file = directory / f"{0:020d}.log"
    bad_position, bad_offset = batch_positions(log_file)[150]
    data = bytearray(log_file.read_bytes())
    data[bad_position + 100] ^= 0xFF
    log_file.write_bytes(bytes(data))

    plog = PartitionLog.open(directory, LogConfig(), recovery_point=point)
    assert plog.log_end_offset == bad_offset
    plog.close()
    indexes = {p.name: p.read_bytes() for p in directory.glob("*index")}
    shutil.copytree(directory, tmp_path / "copy-0")
    for path in (tmp_path / "copy-0").glob("*index"):
        path.unlink()
    rebuilt = PartitionLog.open(tmp_path / "copy-0", LogConfig())
    plog = PartitionLog.open(directory, LogConfig())
    try:
        assert plog.validated_bytes_at_open == 0  # the files agree: a clean stop's load
        rebuilt.close()
        assert {p.name: p.read_bytes() for p in (tmp_path / "copy-0").glob("*index")} == indexes
        assert read_all(plog) == list(range(bad_offset))
    finally:
        plog.close()


def test_corrupt_byte_below_the_recovery_point_is_not_read(tmp_path: Path) -> None:
    """The trade Kafka makes: what was fsynced below the recovery point is not read again, so a
    byte the disk later changed there goes unnoticed at start. Full recovery would find it, and
    so does the first read of it (checked_reads.py), which refuses to serve it."""
    directory = tmp_path / "t-0"
    point, position, end, size = checkpointed_log(directory)
    log_file = directory / f"{0:020d}.log"
    bad_position, bad_offset = batch_positions(log_file)[1000]
    data = bytearray(log_file.read_bytes())
    data[bad_position + 100] ^= 0xFF
    log_file.write_bytes(bytes(data))
    shutil.copytree(directory, tmp_path / "copy-0")

    plog = PartitionLog.open(directory, LogConfig(), recovery_point=point)
    full = PartitionLog.open(tmp_path / "copy-0", LogConfig())
    try:
        assert plog.validated_bytes_at_open == size - position
        assert plog.log_end_offset == end  # nothing cut
        with pytest.raises(CorruptRecordError, match="CRC"):
            plog.read(bad_offset, 1)
        assert full.validated_bytes_at_open == size
        assert full.log_end_offset == bad_offset  # a full recovery cuts there
    finally:
        full.delete()
        plog.close()


def _truncate_log(directory: Path, point: int) -> int:
    """The log file loses its end, the recovery point's batch included."""
    log_file = directory / f"{0:020d}.log"
    position, _ = batch_positions(log_file)[500]
    os.truncate(log_file, position)
    return point


def _point_inside_a_batch(directory: Path, point: int) -> int:
    return point + 1  # batches hold 2 records


def _point_past_the_end(directory: Path, point: int) -> int:
    return 5000


def _offset_index_lost(directory: Path, point: int) -> int:
    (directory / f"{0:020d}.index").unlink()
    return point


def _index_entry_points_at_another_batch(directory: Path, point: int) -> int:
    index = directory / f"{0:020d}.index"
    data = bytearray(index.read_bytes())
    entries = [(int.from_bytes(data[i : i + 4]), i) for i in range(0, len(data), 8)]
    last_below = max(i for relative, i in entries if relative < point)
    data[last_below + 4 : last_below + 8] = data[last_below - 4 : last_below]  # previous position
    index.write_bytes(bytes(data))
    return point


@pytest.mark.parametrize("disagree", [_truncate_log, _point_inside_a_batch, _point_past_the_end,
                                      _offset_index_lost, _index_entry_points_at_another_batch])
def test_files_that_disagree_with_the_recovery_point_get_full_recovery(
        tmp_path: Path, disagree: Callable[[Path, int], int],
        caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "t-0"
    point, *_ = checkpointed_log(directory)
    recovery_point = disagree(directory, point)
    log_file = directory / f"{0:020d}.log"
    size = log_file.stat().st_size
    end = batch_positions(log_file)[-1][1] + 2  # batches hold 2 records
    with caplog.at_level(logging.WARNING, logger="exactly.log.loader"):
        plog = PartitionLog.open(directory, LogConfig(), recovery_point=recovery_point)
    try:
        assert "event=recovery_point_unusable" in caplog.text
        assert plog.validated_bytes_at_open == size  # the whole segment, as without a checkpoint
        assert plog.log_end_offset == end
        assert plog.flushed_offset == 0
        assert read_all(plog) == list(range(end))
        entry = plog.producer_state.last_entry(PID)
        assert entry is not None and entry.last_sequence == end - 1
    finally:
        plog.close()


def test_roll_after_the_checkpoint_validates_the_new_active_segment(tmp_path: Path) -> None:
    """A recovery point below the active segment: the older segments were fsynced at roll and are
    trusted; the active one is validated whole."""
    config = LogConfig(segment_bytes=300_000)
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(directory, config)
    append_batches(plog, 200)
    plog.flush()
    point = plog.recovery_point()
    segments = len(plog.segments)
    while len(plog.segments) == segments:
        append_batches(plog, 1)
    append_batches(plog, 10)
    active_size, end = plog.active_segment.size, plog.log_end_offset
    crash(plog)
    plog = PartitionLog.open(directory, config, recovery_point=point)
    try:
        assert plog.validated_bytes_at_open == active_size
        assert read_all(plog) == list(range(end))
    finally:
        plog.close()


def test_log_manager_writes_and_uses_the_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    logs = LogManager(tmp_path, LogConfig())
    logs.create_topic("a", 2)
    busy, idle = logs.get_log("a", 0), logs.get_log("a", 1)
    append_batches(busy, 300)
    logs.flush_all()
    logs.checkpoint_recovery_points()
    assert read_checkpoint(path) == {("a", 0): 600, ("a", 1): 0}
    position = busy.active_segment.size
    append_batches(busy, 5)
    size = busy.active_segment.size
    crash(busy)
    crash(idle)

    logs = LogManager(tmp_path, LogConfig())
    busy = logs.get_log("a", 0)
    assert busy.validated_bytes_at_open == size - position
    assert read_all(busy) == list(range(610))
    append_batches(busy, 1)
    logs.close()
    assert read_checkpoint(path) == {("a", 0): 612, ("a", 1): 0}
    logs.close()  # closed already: the checkpoint stays
    assert read_checkpoint(path) == {("a", 0): 612, ("a", 1): 0}
    logs = LogManager(tmp_path, LogConfig())
    try:
        assert logs.get_log("a", 0).validated_bytes_at_open == 0
        assert read_all(logs.get_log("a", 0)) == list(range(612))
    finally:
        logs.close()


WRITER = textwrap.dedent("""
    import itertools, sys, time
    from pathlib import Path
    from exactly.log import LogConfig, LogManager
    from exactly.protocol.records import Record, build_batch

    logs = LogManager(Path(sys.argv[1]), LogConfig())
    logs.create_topic("k", 1)
    plog = logs.get_log("k", 0)
    for i in itertools.count():
        # An idempotent producer (5) beside a transactional one (9) whose transactions alternate
        # commit and abort, so that recovery has sequences, open transactions and aborts to get right.
        now = int(time.time() * 1000)  # the markers' time: the segment must not roll by age
        plog.append(build_batch([Record(b"k", b"v" * 300)] * 3, timestamp=now, producer_id=5,
                                producer_epoch=0, base_sequence=3 * i))
        plog.append(build_batch([Record(b"t", b"x" * 100)], timestamp=now, producer_id=9,
                                producer_epoch=0, base_sequence=i, transactional=True))
        if i % 2:
            plog.append_marker(9, 0, commit=i % 4 == 1)
        if i % 10 == 9:
            plog.flush()
            print(plog.flushed_offset, flush=True)
        if i % 300 == 299:
            logs.checkpoint_recovery_points()
""")


def expected_state(plog: PartitionLog) -> tuple[int, int, int | None, list[tuple[int, int]]]:
    """From the recovered log, read and decoded here: producer 5's last sequence, producer 9's,
    the first offset of 9's open transaction (None), and the aborted transactions."""
    last5 = last9 = -1
    open9: int | None = None
    aborted: list[tuple[int, int]] = []
    offset = 0
    while offset < plog.log_end_offset:
        for header in iter_batches(plog.read(offset, 1 << 20), validate=True):
            if header.is_control:
                marker = parse_marker(header)
                assert marker is not None and open9 is not None
                if not marker.commit:
                    aborted.append((9, open9))
                open9 = None
            elif header.producer_id == 5:
                last5 = header.last_sequence
            else:
                last9 = header.last_sequence
                open9 = header.base_offset if open9 is None else open9
            offset = header.last_offset + 1
    return last5, last9, open9, aborted


def test_kill9_of_a_writer_that_checkpoints(tmp_path: Path) -> None:
    checkpoint = tmp_path / RECOVERY_POINT_CHECKPOINT
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120
    while read_checkpoint(checkpoint).get(("k", 0), 0) < 5000:  # a few checkpoints
        assert proc.poll() is None, "the writer died"
        assert time.monotonic() < deadline, "the writer checkpointed no offset 5000 in 120 s"
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()  # every flushed offset it printed before it died
    assert proc.returncode == -signal.SIGKILL
    acknowledged = int(out.split()[-1])
    directory = tmp_path / "k-0"
    assert not (directory / ".clean_shutdown").exists()
    point = read_checkpoint(checkpoint)[("k", 0)]
    assert 5000 <= point <= acknowledged
    log_file = directory / f"{0:020d}.log"
    size = log_file.stat().st_size
    position = boundaries(log_file)[point]  # a batch boundary, always

    logs = LogManager(tmp_path, LogConfig())
    try:
        plog = logs.get_log("k", 0)
        assert plog.validated_bytes_at_open == size - position  # only after the recovery point
        assert plog.log_end_offset >= acknowledged
        assert read_all(plog) == list(range(plog.log_end_offset))
        last5, last9, open9, aborted = expected_state(plog)
        assert aborted  # the writer aborted every other transaction
        entry5, entry9 = plog.producer_state.last_entry(5), plog.producer_state.last_entry(9)
        assert entry5 is not None and entry5.last_sequence == last5
        assert entry9 is not None and entry9.last_sequence == last9
        assert plog.ongoing_transactions() == ({} if open9 is None else {9: open9})
        assert plog.last_stable_offset == (plog.log_end_offset if open9 is None else open9)
        assert plog.aborted_transactions(0, plog.log_end_offset) == aborted
        nxt = batch(1, pid=5, epoch=0, seq=last5 + 1)
        assert plog.append(nxt).base_offset == plog.log_end_offset - 1
    finally:
        logs.close()


def test_a_producer_snapshot_at_the_checkpoint_bounds_the_replay(tmp_path: Path) -> None:
    """With each checkpoint the broker snapshots the producer state of logs that grew: after a
    crash the replay starts there, not at the active segment's base, and the state is the same
    as a full replay gives; the index entry of an aborted transaction below it, which the
    replay does not recompute, comes from its file (fsynced with the snapshot)."""
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(directory, LogConfig())
    append_batches(plog, 300)
    plog.append(batch(1, pid=9, epoch=0, seq=0, transactional=True))
    plog.append_marker(9, 0, commit=False)
    plog.flush()
    plog.recovery_point()
    write = plog.snapshot_producer_state()
    assert write is not None
    write()
    assert plog.snapshot_producer_state() is None  # nothing new since
    snapshot_at = plog.log_end_offset
    append_batches(plog, 20)
    expected = plog.producer_state.last_entry(PID)
    crash(plog)

    again = PartitionLog.open(directory, LogConfig())
    try:
        assert again.replayed_from_at_open == snapshot_at > again.active_segment.base_offset
        assert again.producer_state.last_entry(PID) == expected
        assert again.aborted_transactions(0, again.log_end_offset) == [(9, 600)]
    finally:
        again.close()
    for path in directory.glob("*.snapshot"):  # without snapshots: the whole log is replayed
        path.unlink()
    full = PartitionLog.open(directory, LogConfig())
    try:
        assert full.replayed_from_at_open == 0
        assert full.producer_state.last_entry(PID) == expected
        assert full.aborted_transactions(0, full.log_end_offset) == [(9, 600)]
    finally:
        full.close()
