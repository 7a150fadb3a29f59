"""`exactly log verify`: check every file of a data directory, reading it whole.

A broker that opens a log trusts its sealed segments and what lies below the recovery point, as
Apache Kafka does (loader.py): it reads no CRC there. A fetch checks the bytes it reads once
(checked_reads.py); this tool checks everything, offline or beside a running broker, and names
the file and the place of each problem:

- every batch of every segment of every partition: length and magic, that it fits in the file,
  CRC-32C, counts; its offsets increasing, not below the base offset the file is named after,
  below the next segment's, within 2^31 of the base (index entries hold 32-bit relative
  offsets); its records decoded (decompressed) with offset deltas increasing up to its
  lastOffsetDelta; a control batch holding a transaction marker;
- the offset index (`.index`): each entry at a batch boundary whose batch has the entry's offset,
  entries increasing, the first at position 0, a sealed segment's not empty;
- the time index (`.timeindex`): each entry naming a batch of the segment whose max timestamp it
  holds, timestamps increasing;
- the aborted-transaction index (`.txnindex`, Kafka's 34-byte entries): each entry ending at an
  ABORT marker of its producer in the segment, in order;
- the checkpoint files (`recovery-point-offset-checkpoint`, `cleaner-offset-checkpoint`):
  Kafka's text format, each offset within its partition's log; and `topics.json` against the
  partition directories.

It only reads. The data-directory lock is the broker's business: the CLI notes a running broker
(its active segments may grow while they are read) and verifies anyway.
"""

from __future__ import annotations

import json
import os
import re
import struct
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from exactly.log.checked_reads import batch_error
from exactly.log.checkpoints import CLEANER_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from exactly.log.manager import METADATA_FILE
from exactly.log.markers import parse_marker
from exactly.log.segment import TornBatch, scan_batches, segment_name
from exactly.protocol.records import RecordBatchError, RecordBatchHeader, decode_records

CHECKPOINT_FILES = (RECOVERY_POINT_CHECKPOINT, CLEANER_CHECKPOINT)
OFFSET_INDEX_ENTRY = struct.Struct(">Ii")  # relative offset, position (index.py)
TIME_INDEX_ENTRY = struct.Struct(">qI")  # timestamp, relative offset
TXN_INDEX_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first, last, last stable offset
_MAX_RELATIVE_OFFSET = 0x7FFFFFFF
_PARTITION_DIR = re.compile(r"(.+)-(\d+)")
_SEGMENT_LOG = re.compile(r"\d{20}\.log")
# Left by an interrupted clean or write; the broker finishes or removes them when it starts.
_LEFT_OVERS = (".cleaned", ".swap", ".tmp")


@dataclass(frozen=True, slots=True)
class Problem:
    path: Path
    where: str  # "offset 120, position 4096", "entry 3", "line 2"; "" for the whole file
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.where}: {self.message}" if self.where else \
            f"{self.path}: {self.message}"


@dataclass(slots=True)
class Report:
    """What verify_data_dir found, and how much it read."""

    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    partitions: int = 0
    segments: int = 0
    batches: int = 0
    records: int = 0
    bytes: int = 0
    index_entries: int = 0
    checkpoints: int = 0

    def problem(self, path: Path, where: str, message: str) -> None:
        self.problems.append(Problem(path, where, message))

    def summary(self) -> str:
        verdict = _count(len(self.problems), "problem") + " found" if self.problems else \
            "no problems found"
        return (f"{_count(self.partitions, 'partition')}, {_count(self.segments, 'segment')}, "
                f"{_count(self.batches, 'batch')} ({_count(self.records, 'record')}, "
                f"{_count(self.bytes, 'byte')}), {_count(self.index_entries, 'index entry')}, "
                f"{_count(self.checkpoints, 'checkpoint file')}: {verdict}")


def _count(n: int, noun: str) -> str:
    plural = noun if n == 1 else noun[:-1] + "ies" if noun.endswith("y") else \
        noun + "es" if noun.endswith("ch") else noun + "s"
    return f"{n:,} {plural}"


def at(offset: int, position: int) -> str:
    return f"offset {offset}, position {position}"


# -- reading the index and checkpoint files (dump.py prints them) -------------------------------


def index_entries(data: bytes, entry: struct.Struct) -> tuple[list[tuple[int, ...]], int]:
    """The fixed-size entries of an index file, and how many bytes trail the last whole one."""
    whole = len(data) - len(data) % entry.size
    return list(entry.iter_unpack(data[:whole])), len(data) - whole


def parse_checkpoint(text: str) -> tuple[list[tuple[int, str, int, int]], list[tuple[int, str]]]:
    """A checkpoint file in Kafka's format (checkpoints.py): its entries as (line number, topic,
    partition, offset), and its problems as (line number, what is wrong)."""
    lines = text.splitlines()
    problems: list[tuple[int, str]] = []
    if not lines or lines[0].strip() != "0":
        problems.append((1, f"version {lines[0] if lines else ''!r}, expected 0"))
    entries: list[tuple[int, str, int, int]] = []
    for number, line in enumerate(lines[2:], start=3):
        fields = line.split(" ")
        if (len(fields) != 3 or not fields[0] or not fields[1].isdigit()
                or not fields[2].lstrip("-").isdigit()):
            problems.append((number, f"{line!r} is not 'topic partition offset'"))
            continue
        entries.append((number, fields[0], int(fields[1]), int(fields[2])))
    count = lines[1].strip() if len(lines) > 1 else ""
    if not count.isdigit():
        problems.append((2, f"entry count {count!r} is not a number"))
    elif int(count) != len(lines) - 2:
        problems.append((2, f"{count} entries announced, {len(lines) - 2} present"))
    return entries, problems


# -- a data directory ---------------------------------------------------------------------------


def verify_data_dir(data_dir: Path) -> Report:
    """Check every partition, segment, index and checkpoint file under `data_dir`."""
    report = Report()
    # Read before the logs: a running broker's later checkpoint may name offsets appended after
    # the logs were read.
    checkpoints = {data_dir / name: _read_text(data_dir / name, report)
                   for name in CHECKPOINT_FILES if (data_dir / name).exists()}
    partition_dirs = sorted(p for p in data_dir.iterdir()
                            if p.is_dir() and _PARTITION_DIR.fullmatch(p.name))
    ends: dict[tuple[str, int], int] = {}
    for directory in partition_dirs:
        m = _PARTITION_DIR.fullmatch(directory.name)
        assert m is not None
        ends[(m.group(1), int(m.group(2)))] = verify_partition(directory, report)
    _verify_topics(data_dir, set(ends), report)
    for path, text in checkpoints.items():
        if text is not None:
            _verify_checkpoint(path, text, ends, report)
    return report


def _read_text(path: Path, report: Report) -> str | None:
    report.checkpoints += 1
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        report.problem(path, "", f"unreadable: {exc}")
        return None


def _verify_topics(data_dir: Path, found: set[tuple[str, int]], report: Report) -> None:
    """topics.json lists every partition directory, as LogManager reads it on start."""
    path = data_dir / METADATA_FILE
    if not path.exists():
        if found:
            report.problem(path, "", "missing, but partition directories exist: a broker will "
                           "not start on this directory; restore it from a backup")
        return
    try:
        listed = {(str(t["name"]), p) for t in json.loads(path.read_text())["topics"]
                  for p in range(int(t["num_partitions"]))}
    except (ValueError, KeyError, TypeError) as exc:
        report.problem(path, "", f"unreadable ({exc}): a broker will not start on this directory")
        return
    for topic, partition in sorted(listed - found):
        report.problem(data_dir / f"{topic}-{partition}", "",
                       "listed in topics.json but missing: a broker would start it empty")
    for topic, partition in sorted(found - listed):
        report.notes.append(f"{data_dir / f'{topic}-{partition}'} is not in topics.json: a "
                            "broker removes it when it starts (an interrupted create or delete)")


def _verify_checkpoint(path: Path, text: str, ends: dict[tuple[str, int], int],
                       report: Report) -> None:
    entries, problems = parse_checkpoint(text)
    for number, message in problems:
        report.problem(path, f"line {number}", message)
    for number, topic, partition, offset in entries:
        end = ends.get((topic, partition))
        if end is None:
            report.notes.append(f"{path}: line {number}: {topic}-{partition} has no directory "
                                "(a deleted topic: the next checkpoint drops it)")
        elif not 0 <= offset <= end:
            report.problem(path, f"line {number}",
                           f"offset {offset} of {topic}-{partition} is outside its log, which "
                           f"ends at offset {end}")


# -- a partition ----------------------------------------------------------------------------------


def verify_partition(directory: Path, report: Report) -> int:
    """Check a partition directory's segments and their indexes; returns its log end offset."""
    report.partitions += 1
    names = sorted(p.name for p in directory.iterdir())
    bases = [int(name[:20]) for name in names if _SEGMENT_LOG.fullmatch(name)]
    for name in names:
        if name.endswith(_LEFT_OVERS):
            report.notes.append(f"{directory / name}: left by an interrupted clean or write; a "
                                "broker finishes or removes it when it starts")
    end = bases[0] if bases else 0
    for i, base in enumerate(bases):
        if base < end:
            report.problem(directory / segment_name(base, ".log"), "",
                           f"base offset {base} overlaps the previous segment, which ends at "
                           f"offset {end}")
        following = bases[i + 1] if i + 1 < len(bases) else None
        segment = verify_segment(directory, base, following, report)
        verify_indexes(segment, sealed=following is not None, report=report)
        end = max(end, segment.next_offset)
    return end


@dataclass(slots=True)
class SegmentBatches:
    """Where the valid batches of one segment are, for checking its indexes against."""

    directory: Path
    base_offset: int
    next_offset: int
    file_size: int = 0
    positions: array[int] = field(default_factory=lambda: array("q"))
    offsets: array[int] = field(default_factory=lambda: array("q"))  # base offset of each batch
    max_timestamps: array[int] = field(default_factory=lambda: array("q"))
    aborts: dict[int, int] = field(default_factory=dict)  # ABORT marker offset -> producer id
    # Batches reported already: index entries pointing at them are not reported again.
    bad_positions: set[int] = field(default_factory=set)
    bad_offsets: set[int] = field(default_factory=set)

    def batch_at(self, position: int) -> int | None:
        """The index of the batch that starts at `position`, if one does."""
        i = bisect_left(self.positions, position)
        return i if i < len(self.positions) and self.positions[i] == position else None

    def batch_of(self, offset: int) -> int | None:
        """The index of the batch whose base offset is `offset`, if one is."""
        i = bisect_left(self.offsets, offset)
        return i if i < len(self.offsets) and self.offsets[i] == offset else None


def verify_segment(directory: Path, base: int, following: int | None,
                   report: Report) -> SegmentBatches:
    """Check every batch of the segment `base` (the next segment starts at `following`)."""
    path = directory / segment_name(base, ".log")
    report.segments += 1
    seen = SegmentBatches(directory, base, base)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = seen.file_size = os.fstat(fd).st_size
        report.bytes += size
        for pos, header in _batches(fd, size, path, report):
            report.batches += 1
            report.records += max(header.records_count, 0)
            where = at(header.base_offset, pos)
            problem = _batch_problem(header, seen.next_offset, base, following)
            if problem is not None:
                report.problem(path, where, problem)
                seen.bad_positions.add(pos)
                seen.bad_offsets.add(header.base_offset)
                continue
            seen.positions.append(pos)
            seen.offsets.append(header.base_offset)
            seen.max_timestamps.append(header.max_timestamp)
            seen.next_offset = header.next_offset
            problem = _records_problem(header)
            if problem is not None:
                report.problem(path, where, problem)
            elif header.is_control:
                marker = parse_marker(header)
                if marker is not None and not marker.commit:
                    seen.aborts[header.base_offset] = header.producer_id
    finally:
        os.close(fd)
    return seen


def _batches(fd: int, size: int, path: Path,
             report: Report) -> Iterator[tuple[int, RecordBatchHeader]]:
    """The whole batches of a segment file, up to where its structure breaks (reported)."""
    try:
        yield from scan_batches(fd, 0, size, whole=True)
    except TornBatch as exc:
        report.problem(path, f"position {exc.position}",
                       f"{exc.reason}; the {size - exc.position:,} bytes from here on cannot be "
                       "read as batches")


def _batch_problem(header: RecordBatchHeader, expected: int, base: int,
                   following: int | None) -> str | None:
    """What is wrong with a batch's header, CRC or offsets, or None."""
    if header.base_offset < base:
        return (f"base offset {header.base_offset} is below the segment's base offset {base} "
                "(its file name)")
    problem = batch_error(header, expected)
    if problem is not None:
        return problem
    if following is not None and header.last_offset >= following:
        return (f"last offset {header.last_offset} runs into the next segment, which starts at "
                f"offset {following}")
    if header.last_offset - base > _MAX_RELATIVE_OFFSET:
        return (f"last offset {header.last_offset} is more than 2^31-1 past the segment's base "
                f"offset {base}")
    if (header.is_transactional or header.is_control) and header.producer_id < 0:
        return "a transactional or control batch without a producer id"
    if header.is_control and not header.is_transactional:
        return "a control batch that is not transactional"
    return None


def _records_problem(header: RecordBatchHeader) -> str | None:
    """What is wrong with the records of a batch whose CRC is right, or None."""
    try:
        records = decode_records(header)
    except (RecordBatchError, IndexError) as exc:
        return f"records cannot be decoded: {exc}"
    previous = -1
    for record in records:
        delta = record.offset - header.base_offset
        if not previous < delta <= header.last_offset_delta:
            return (f"record offset delta {delta} after {previous}: the deltas must increase up "
                    f"to the batch's lastOffsetDelta {header.last_offset_delta}")
        previous = delta
    if header.is_control and parse_marker(header) is None:
        return "a control batch that holds no transaction marker"
    return None


# -- its indexes ----------------------------------------------------------------------------------


def verify_indexes(seen: SegmentBatches, *, sealed: bool, report: Report) -> None:
    """Check the offset, time and aborted-transaction indexes of a segment against its batches.
    The active segment's offset and time entries are written lazily: they may lag its batches."""
    for suffix in (".index", ".timeindex", ".txnindex"):
        path = seen.directory / segment_name(seen.base_offset, suffix)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            report.problem(path, "", "missing: a broker rebuilds it from the log when it opens it")
            continue
        if suffix == ".txnindex":
            _txn_index(path, data, seen, report)
            continue
        entries = _entries(path, data, TIME_INDEX_ENTRY if suffix == ".timeindex" else
                           OFFSET_INDEX_ENTRY, report)
        if sealed and seen.positions and not entries:
            report.problem(path, "", "empty, but its sealed segment holds batches")
        if suffix == ".index":
            _sparse_index(path, [(seen.base_offset + rel, pos) for rel, pos in entries],
                          ("offset", "position"), _offset_entry, seen, report)
        else:
            _sparse_index(path, [(ts, seen.base_offset + rel) for ts, rel in entries],
                          ("timestamp", "offset"), _time_entry, seen, report)


def _entries(path: Path, data: bytes, entry: struct.Struct,
             report: Report) -> list[tuple[int, ...]]:
    entries, trailing = index_entries(data, entry)
    if trailing:
        report.problem(path, f"position {len(data) - trailing}",
                       f"{trailing} bytes after the last whole {entry.size}-byte entry")
    report.index_entries += len(entries)
    return entries


def _sparse_index(path: Path, entries: list[tuple[int, int]], names: tuple[str, str],
                  check: Callable[[SegmentBatches, int, int, int], str | None],
                  seen: SegmentBatches, report: Report) -> None:
    """An offset index (offset, position) or a time index (timestamp, offset): the first field
    of each entry increases, the second does not decrease (two offsets at one position fail
    `check`, which says what is wrong with an entry in itself)."""
    previous: tuple[int, int] | None = None
    for number, (key, value) in enumerate(entries):
        problem = None
        if previous is not None and (key <= previous[0] or value < previous[1]):
            problem = (f"not after the entry before it ({names[0]} {previous[0]}, {names[1]} "
                       f"{previous[1]})")
        if problem is None:
            problem = check(seen, number, key, value)
        if problem is not None:
            report.problem(path, f"entry {number} ({names[0]} {key}, {names[1]} {value})", problem)
        previous = (key, value)


def _offset_entry(seen: SegmentBatches, number: int, offset: int, position: int) -> str | None:
    """An offset index entry points at the batch holding its offset, the first at position 0."""
    batch = seen.batch_at(position)
    if number == 0 and position != 0:
        return "the first entry does not point at position 0"
    if position >= seen.file_size:
        return f"the position is past the end of the file ({seen.file_size} bytes)"
    if batch is None:  # a batch reported already, or none
        return None if position in seen.bad_positions else \
            "the position is not at a batch boundary of the segment"
    return None if seen.offsets[batch] == offset else \
        f"the batch there has base offset {seen.offsets[batch]}"


def _time_entry(seen: SegmentBatches, _number: int, timestamp: int, offset: int) -> str | None:
    """A time index entry names the batch that first reached its timestamp, its max."""
    batch = seen.batch_of(offset)
    if batch is None:  # a batch reported already, or none
        return None if offset in seen.bad_offsets else \
            "no batch of the segment has this base offset"
    found = seen.max_timestamps[batch]
    return None if found == timestamp else f"the batch's max timestamp is {found}"


def _txn_index(path: Path, data: bytes, seen: SegmentBatches, report: Report) -> None:
    previous = seen.base_offset - 1
    for number, (version, pid, first, last, _lso) in enumerate(
            _entries(path, data, TXN_INDEX_ENTRY, report)):
        where = f"entry {number} (producer {pid}, offsets {first}-{last})"
        problem = None
        if version != 0:
            problem = f"version {version}, expected 0"
        elif not 0 <= first <= last:
            problem = "the first offset is not between 0 and the last offset"
        elif last <= previous:
            problem = f"its last offset is not after the entry before it ({previous})"
        elif last >= seen.next_offset:
            problem = f"its last offset is past the segment's end ({seen.next_offset})"
        elif seen.aborts.get(last) != pid:
            problem = f"no ABORT marker of producer {pid} at offset {last} in the segment"
        if problem is not None:
            report.problem(path, where, problem)
        previous = max(previous, last)

