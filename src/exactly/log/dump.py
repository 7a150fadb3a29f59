"""`exactly log dump FILE...`: what a log file holds, line by line, in the words of Kafka's
`kafka-dump-log.sh` (DumpLogSegments), so that its readers and their scripts feel at home:

- a segment (`.log`): a line per batch (baseOffset, lastOffset, count, sequences, producer id and
  epoch, isTransactional, isControl, position, timestamp, size, compression, CRC and whether it
  is valid); with `deep` a line per record (`| offset: ...`), with `print_data` its key, value and
  headers too; a control record shows its marker (`endTxnMarker: COMMIT coordinatorEpoch: 0`);
  bytes at the end that do not form a batch are counted, as Kafka does;
- an offset index (`.index`): `offset: O position: P`; a time index (`.timeindex`):
  `timestamp: T offset: O`; an aborted-transaction index (`.txnindex`): `version: 0
  producerId: P firstOffset: F lastOffset: L lastStableOffset: S`;
- a checkpoint file (`recovery-point-offset-checkpoint`, `cleaner-offset-checkpoint`):
  `topic: T partition: P offset: O`.

It prints what is there; checking the files against each other is `exactly log verify`'s work
(verify.py).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

from exactly.log.markers import parse_marker
from exactly.log.segment import TornBatch, scan_batches
from exactly.log.verify import (
    CHECKPOINT_FILES,
    OFFSET_INDEX_ENTRY,
    TIME_INDEX_ENTRY,
    TXN_INDEX_ENTRY,
    index_entries,
    parse_checkpoint,
)
from exactly.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    COMPRESSION_NAMES,
    Record,
    RecordBatchError,
    RecordBatchHeader,
    decode_records,
)

KINDS = ".log, .index, .timeindex, .txnindex or a checkpoint file (" + \
    ", ".join(CHECKPOINT_FILES) + ")"


class UnknownFileError(ValueError):
    """A file that dump_file cannot print."""


def dump_file(path: Path, *, print_data: bool = False, deep: bool = False) -> Iterator[str]:
    """The lines that describe `path`. `print_data` (implies `deep`): records with their keys,
    values and headers; `deep`: a line per record."""
    name = path.name
    if name.endswith(".log"):
        lines = _log(path, deep=deep or print_data, print_data=print_data)
    elif name.endswith(".index"):
        lines = _index(path, OFFSET_INDEX_ENTRY,
                       lambda rel, pos, base: f"offset: {base + rel} position: {pos}")
    elif name.endswith(".timeindex"):
        lines = _index(path, TIME_INDEX_ENTRY,
                       lambda ts, rel, base: f"timestamp: {ts} offset: {base + rel}")
    elif name.endswith(".txnindex"):
        lines = _txn_index(path)
    elif name in CHECKPOINT_FILES or name.endswith("-checkpoint"):
        lines = _checkpoint(path)
    else:
        raise UnknownFileError(f"{path}: cannot dump this kind of file; give a {KINDS}")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: {'not a file' if path.exists() else 'no such file'}")
    yield f"Dumping {path}"
    yield from lines


def _base_offset(path: Path) -> int:
    stem = path.name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else 0


def _log(path: Path, *, deep: bool, print_data: bool) -> Iterator[str]:
    yield f"Log starting offset: {_base_offset(path)}"
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        try:
            for position, batch in scan_batches(fd, 0, size, whole=True):
                yield _batch_line(position, batch)
                if deep:
                    yield from _record_lines(batch, print_data)
        except TornBatch as exc:
            yield (f"Found {size - exc.position} invalid bytes at the end of {path.name} "
                   f"({exc.reason})")
    finally:
        os.close(fd)


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _timestamp_type(batch: RecordBatchHeader) -> str:
    return "LogAppendTime" if batch.attributes & ATTR_TIMESTAMP_TYPE else "CreateTime"


def _batch_line(position: int, b: RecordBatchHeader) -> str:
    codec = COMPRESSION_NAMES.get(b.compression, str(b.compression))
    return (f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.records_count} "
            f"baseSequence: {b.base_sequence} lastSequence: {b.last_sequence} "
            f"producerId: {b.producer_id} producerEpoch: {b.producer_epoch} "
            f"partitionLeaderEpoch: {b.partition_leader_epoch} "
            f"isTransactional: {_flag(b.is_transactional)} isControl: {_flag(b.is_control)} "
            f"position: {position} {_timestamp_type(b)}: {b.max_timestamp} size: {b.size} "
            f"magic: {b.magic} compresscodec: {codec} crc: {b.crc} "
            f"isvalid: {_flag(b.compute_crc() == b.crc)}")


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", "backslashreplace")


def _record_lines(batch: RecordBatchHeader, print_data: bool) -> Iterator[str]:
    try:
        records = decode_records(batch)
    except (RecordBatchError, IndexError) as exc:
        yield f"| cannot decode the records: {exc}"
        return
    marker = parse_marker(batch) if batch.is_control else None
    for record in records:
        yield _record_line(batch, record, print_data, marker_text=(
            None if not batch.is_control else "controlType: unknown" if marker is None else
            f"endTxnMarker: {'COMMIT' if marker.commit else 'ABORT'} "
            f"coordinatorEpoch: {marker.coordinator_epoch}"))


def _record_line(batch: RecordBatchHeader, r: Record, print_data: bool,
                 marker_text: str | None) -> str:
    delta = r.offset - batch.base_offset
    sequence = -1 if batch.base_sequence < 0 else (batch.base_sequence + delta) & 0x7FFFFFFF
    timestamp = batch.max_timestamp if batch.attributes & ATTR_TIMESTAMP_TYPE else r.timestamp
    line = (f"| offset: {r.offset} {_timestamp_type(batch)}: {timestamp} "
            f"keySize: {-1 if r.key is None else len(r.key)} "
            f"valueSize: {-1 if r.value is None else len(r.value)} sequence: {sequence} "
            f"headerKeys: [{','.join(key for key, _ in r.headers)}]")
    if marker_text is not None:
        return f"{line} {marker_text}"
    if print_data:
        line += f" key: {_text(r.key)} payload: {_text(r.value)}"
        if r.headers:
            line += " headers: [" + ",".join(f"{k}={_text(v)}" for k, v in r.headers) + "]"
    return line


def _trailing(path: Path, trailing: int) -> Iterator[str]:
    if trailing:
        yield f"Found {trailing} invalid bytes at the end of {path.name}"


def _index(path: Path, entry: struct.Struct,
           describe: Callable[[int, int, int], str]) -> Iterator[str]:
    """An offset or time index: `describe(first field, second field, base offset)` per entry."""
    entries, trailing = index_entries(path.read_bytes(), entry)
    if not entries and not trailing:
        yield f"{path} is empty."
    base = _base_offset(path)
    for a, b in entries:
        yield describe(a, b, base)
    yield from _trailing(path, trailing)


def _txn_index(path: Path) -> Iterator[str]:
    entries, trailing = index_entries(path.read_bytes(), TXN_INDEX_ENTRY)
    for version, pid, first, last, lso in entries:
        yield (f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
               f"lastStableOffset: {lso}")
    yield from _trailing(path, trailing)


def _checkpoint(path: Path) -> Iterator[str]:
    entries, problems = parse_checkpoint(path.read_text(errors="replace"))
    for _line, topic, partition, offset in entries:
        yield f"topic: {topic} partition: {partition} offset: {offset}"
    for line, problem in problems:
        yield f"line {line}: {problem}"
