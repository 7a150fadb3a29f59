"""`exactly log verify` and `exactly log dump` on real log files (issue 14, item 5): a log as the
broker writes it (several segments, transactions, a cleaned compacted log) has no problem; each
kind of damage is found and named with its file and place; dump prints what is there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exactly.log import LogConfig, PartitionLog
from exactly.log.checkpoints import RECOVERY_POINT_CHECKPOINT, write_checkpoint
from exactly.log.cleaner import LogCleaner
from exactly.log.config import CleanerConfig
from exactly.log.dump import UnknownFileError, dump_file
from exactly.log.manager import METADATA_FILE
from exactly.log.segment import segment_name
from exactly.log.verify import Problem, verify_data_dir
from exactly.protocol.records import HEADER_SIZE, Record, build_batch, iter_batches
from tests.helpers.log.log_helpers import FakeClock, batch

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100)
PID = 42


def write_topics(data_dir: Path, partitions: dict[str, int]) -> None:
    (data_dir / METADATA_FILE).write_text(json.dumps({"version": 1, "topics": [
        {"name": name, "topic_id": f"00000000-0000-0000-0000-{i:012d}", "num_partitions": count}
        for i, (name, count) in enumerate(partitions.items())]}))


@pytest.fixture
def data_dir(tmp_path: Path, clock: FakeClock) -> Path:
    """A data directory as a broker leaves it after a clean stop: topic t with one partition of
    five segments (plain batches, a committed and an aborted transaction), topics.json and the
    recovery-point checkpoint."""
    plog = PartitionLog.open(tmp_path / "t-0", CONFIG, clock=clock)
    for i in range(10):
        plog.append(batch(2, value_size=40, ts=1000 + i))
    for seq, commit in ((0, True), (2, False)):
        plog.append(batch(2, pid=PID, epoch=0, seq=seq, transactional=True))
        plog.append_marker(PID, 0, commit=commit)
    plog.close()
    write_topics(tmp_path, {"t": 1})
    write_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT, {("t", 0): plog.log_end_offset})
    return tmp_path


def segment(data_dir: Path, index: int, suffix: str = ".log") -> Path:
    bases = sorted(int(p.stem) for p in (data_dir / "t-0").glob("*.log"))
    return data_dir / "t-0" / segment_name(bases[index], suffix)


def flip(path: Path, position: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))


def problems(data_dir: Path) -> list[Problem]:
    return verify_data_dir(data_dir).problems


def test_a_log_as_the_broker_writes_it_has_no_problem(data_dir: Path) -> None:
    report = verify_data_dir(data_dir)
    assert report.problems == [] and report.notes == []
    assert (report.partitions, report.segments, report.checkpoints) == (1, 5, 1)
    assert report.records == 26 and report.batches == 14
    assert report.summary().endswith(": no problems found")


def test_a_cleaned_compacted_log_has_no_problem(tmp_path: Path, clock: FakeClock) -> None:
    """Cleaning leaves offset gaps, empty batches and fewer index entries: all legitimate."""
    config = LogConfig(segment_bytes=400, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    plog = PartitionLog.open(tmp_path / "c-0", config, clock=clock)
    for i in range(60):
        plog.append(build_batch([Record(f"k{i % 3}".encode(), f"value {i}".encode())],
                                timestamp=clock.ms, producer_id=5, producer_epoch=0,
                                base_sequence=i))
    cleaner = LogCleaner(tmp_path, lambda: [plog], CleanerConfig(), clock=clock)
    assert cleaner.clean_once(clock.ms) is not None
    plog.close()
    write_topics(tmp_path, {"c": 1})
    assert problems(tmp_path) == []


@pytest.mark.parametrize(("where", "expected"), [
    ("payload", "record batch CRC mismatch"),
    ("crc", "record batch CRC mismatch"),
    ("length", "runs past the end of the segment"),
])
def test_a_flipped_byte_in_an_older_segment_is_found(data_dir: Path, where: str,
                                                     expected: str) -> None:
    path = segment(data_dir, 1)
    second = list(iter_batches(path.read_bytes()))[1]
    at = {"payload": second.position + HEADER_SIZE + 20, "crc": second.position + 17,
          "length": second.position + 9}[where]
    flip(path, at, 0x10)
    found = problems(data_dir)
    assert found, "nothing found"
    first = found[0]
    assert first.path == path and expected in first.message
    if where == "length":
        assert first.where == f"position {second.position}"
    else:
        assert first.where == f"offset {second.base_offset}, position {second.position}"


def test_a_torn_tail_is_found(data_dir: Path) -> None:
    path = segment(data_dir, -1)
    size = path.stat().st_size
    path.write_bytes(path.read_bytes() + batch(3)[:-10])
    (first,) = problems(data_dir)
    assert first.path == path and first.where == f"position {size}"
    assert "runs past the end of the segment" in first.message


def test_offsets_going_backwards_are_found(data_dir: Path) -> None:
    path = segment(data_dir, 0)
    second = list(iter_batches(path.read_bytes()))[1]
    data = bytearray(path.read_bytes())
    data[second.position : second.position + 8] = (0).to_bytes(8, "big")  # outside the CRC
    path.write_bytes(bytes(data))
    found = problems(data_dir)
    assert found[0].path == path
    assert found[0].where == f"offset 0, position {second.position}"
    assert "offsets not increasing" in found[0].message


def test_a_batch_running_into_the_next_segment_is_found(data_dir: Path) -> None:
    path = segment(data_dir, 0)
    last = list(iter_batches(path.read_bytes()))[-1]
    data = bytearray(path.read_bytes())
    data[last.position : last.position + 8] = (last.base_offset + 50).to_bytes(8, "big")
    path.write_bytes(bytes(data))
    assert any(p.path == path and "runs into the next segment" in p.message
               for p in problems(data_dir))


def test_bad_index_entries_are_found(data_dir: Path) -> None:
    index, time_index = segment(data_dir, 0, ".index"), segment(data_dir, 0, ".timeindex")
    data = bytearray(index.read_bytes())
    data[-4:] = (int.from_bytes(data[-4:], "big") + 3).to_bytes(4, "big")  # inside a batch
    index.write_bytes(bytes(data) + b"\x00\x01")
    data = bytearray(time_index.read_bytes())
    data[-12:-4] = (int.from_bytes(data[-12:-4], "big") + 1).to_bytes(8, "big")
    time_index.write_bytes(bytes(data))
    found = {(p.path, p.message) for p in problems(data_dir)}
    assert (index, "the position is not at a batch boundary of the segment") in found
    assert (index, "2 bytes after the last whole 8-byte entry") in found
    assert any(path == time_index and "max timestamp" in message for path, message in found)


def test_an_index_entry_past_the_end_of_the_file_is_found(data_dir: Path) -> None:
    index = segment(data_dir, 0, ".index")
    data = bytearray(index.read_bytes())
    data[-4:] = (100_000).to_bytes(4, "big")
    index.write_bytes(bytes(data))
    size = segment(data_dir, 0).stat().st_size
    (found,) = problems(data_dir)
    assert found.path == index and found.where == "entry 2 (offset 4, position 100000)"
    assert found.message == f"the position is past the end of the file ({size} bytes)"


def test_a_txnindex_entry_without_its_abort_marker_is_found(data_dir: Path) -> None:
    holding = next(p for p in sorted((data_dir / "t-0").glob("*.txnindex")) if p.stat().st_size)
    flip(holding, 9)  # the producer id
    (found,) = problems(data_dir)
    assert found.path == holding and found.where.startswith("entry 0 (producer")
    assert "no ABORT marker of producer" in found.message


def test_checkpoints_and_topics_json_are_checked(data_dir: Path) -> None:
    checkpoint = data_dir / RECOVERY_POINT_CHECKPOINT
    checkpoint.write_text("0\n2\nt 0 1000\n")
    write_topics(data_dir, {"t": 2})
    found = [str(p) for p in problems(data_dir)]
    assert f"{checkpoint}: line 2: 2 entries announced, 1 present" in found
    assert any(p.startswith(f"{checkpoint}: line 3: offset 1000 of t-0 is outside its log")
               for p in found)
    assert f"{data_dir / 't-1'}: listed in topics.json but missing: a broker would start it " \
           "empty" in found


def test_dump_prints_batches_records_and_markers(data_dir: Path) -> None:
    path = segment(data_dir, -1)  # COMMIT marker, the aborted transaction's batch, ABORT marker
    lines = list(dump_file(path, print_data=True))
    assert lines[0] == f"Dumping {path}"
    assert lines[1] == f"Log starting offset: {int(path.stem)}"
    batches = [line for line in lines if line.startswith("baseOffset: ")]
    assert [b.split(" isControl: ")[1].split()[0] for b in batches] == ["true", "false", "true"]
    assert all(b.endswith("isvalid: true") for b in batches)
    assert f"producerId: {PID} producerEpoch: 0" in batches[1]
    assert "baseOffset: 23 lastOffset: 24 count: 2 baseSequence: 2 lastSequence: 3" in batches[1]
    assert "isTransactional: true isControl: false position: 78 CreateTime: 1000 " in batches[1]
    records = [line for line in lines if line.startswith("| ")]
    assert records[0].endswith("endTxnMarker: COMMIT coordinatorEpoch: 0")
    assert records[1] == ("| offset: 23 CreateTime: 1000 keySize: 2 valueSize: 11 sequence: 2 "
                          "headerKeys: [] key: k0 payload: vxxxxxxxxx0")
    assert records[-1].endswith("endTxnMarker: ABORT coordinatorEpoch: 0")
    assert not [line for line in dump_file(path) if line.startswith("| ")]


def test_dump_shows_a_bad_crc_and_trailing_bytes(data_dir: Path) -> None:
    path = segment(data_dir, 0)
    flip(path, HEADER_SIZE + 5)
    with open(path, "ab") as f:
        f.write(b"\x00" * 7)
    lines = list(dump_file(path))
    assert lines[2].endswith("isvalid: false") and lines[3].endswith("isvalid: true")
    assert lines[-1].startswith(f"Found 7 invalid bytes at the end of {path.name} (")


def test_dump_prints_indexes_and_checkpoints(data_dir: Path) -> None:
    index = list(dump_file(segment(data_dir, 0, ".index")))
    assert index[1:] == ["offset: 0 position: 0", "offset: 2 position: 161",
                         "offset: 4 position: 322"]
    assert list(dump_file(segment(data_dir, 0, ".timeindex")))[1] == "timestamp: 1000 offset: 0"
    txn = [line for p in sorted((data_dir / "t-0").glob("*.txnindex"))
           for line in dump_file(p) if not line.startswith("Dumping")]
    assert txn == [(f"version: 0 producerId: {PID} firstOffset: 23 lastOffset: 25 "
                    "lastStableOffset: 26")]
    checkpoint = list(dump_file(data_dir / RECOVERY_POINT_CHECKPOINT))
    assert checkpoint[1:] == ["topic: t partition: 0 offset: 26"]
    with pytest.raises(UnknownFileError, match="cannot dump this kind of file"):
        list(dump_file(data_dir / METADATA_FILE))
