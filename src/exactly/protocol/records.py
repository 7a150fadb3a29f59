"""Record batches, magic 2: a zero-copy header view, validation, decoding and building.

Layout (KIP-98): baseOffset int64, batchLength int32, partitionLeaderEpoch int32, magic int8,
crc uint32 (CRC-32C of everything from attributes to the end), attributes int16,
lastOffsetDelta int32, baseTimestamp int64, maxTimestamp int64, producerId int64,
producerEpoch int16, baseSequence int32, recordCount int32, then the records.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import cramjam
import crc32c

from exactly.protocol.primitives import read_varint, write_varint

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part not counted in batchLength
MAGIC = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_CRC = struct.Struct(">I")

COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD = range(5)
COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08  # set: LogAppendTime
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

_XERIAL_MAGIC = b"\x82SNAPPY\x00"


class RecordBatchError(ValueError):
    """A record batch that cannot be accepted. `corrupt` tells CORRUPT_MESSAGE from INVALID_RECORD."""

    def __init__(self, message: str, *, corrupt: bool = True) -> None:
        super().__init__(message)
        self.corrupt = corrupt


class RecordBatchHeader:
    """A view of one batch inside a buffer, decoded from its 61-byte header without copying."""

    __slots__ = (
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "batch_length",
        "buffer",
        "crc",
        "last_offset_delta",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "position",
        "producer_epoch",
        "producer_id",
        "records_count",
    )

    def __init__(self, buffer: bytes | bytearray | memoryview, position: int = 0) -> None:
        if len(buffer) - position < HEADER_SIZE:
            raise RecordBatchError(
                f"record batch header truncated: {len(buffer) - position} bytes, need {HEADER_SIZE}"
            )
        self.buffer = buffer
        self.position = position
        (
            self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic,
            self.crc, self.attributes, self.last_offset_delta, self.base_timestamp,
            self.max_timestamp, self.producer_id, self.producer_epoch, self.base_sequence,
            self.records_count,
        ) = _HEADER.unpack_from(buffer, position)

    @property
    def size(self) -> int:
        """Bytes the batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def end(self) -> int:
        return self.position + self.size

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    def raw(self) -> memoryview:
        return memoryview(self.buffer)[self.position : self.end]

    def compute_crc(self) -> int:
        return crc32c.crc32c(memoryview(self.buffer)[self.position + 21 : self.end])

    def validate(self, max_size: int | None = None, *, dense: bool = True) -> None:
        """Check what can be checked without decoding records: magic, lengths, CRC, counts.

        `dense`: one record per offset, as producers write batches. A log that was cleaned
        holds batches with gaps (records removed, offsets kept): check those with dense=False."""
        if self.magic != MAGIC:
            raise RecordBatchError(f"unsupported record batch magic {self.magic}, only magic 2 is accepted",
                                   corrupt=False)
        if self.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise RecordBatchError(f"record batch length {self.batch_length} is shorter than its header")
        if self.end > len(self.buffer):
            raise RecordBatchError(
                f"record batch truncated: length says {self.size} bytes, "
                f"{len(self.buffer) - self.position} present"
            )
        if max_size is not None and self.size > max_size:
            raise RecordBatchError(f"record batch of {self.size} bytes exceeds the limit of {max_size}",
                                   corrupt=False)
        if self.records_count < 0 or self.last_offset_delta < 0:
            raise RecordBatchError("record batch has a negative record count or offset delta", corrupt=False)
        if (dense and self.records_count > 0 and self.last_offset_delta != self.records_count - 1
                and not self.is_control):
            # Kafka's own producers always write dense batches; a gap here is a broken client.
            raise RecordBatchError(
                f"record batch lastOffsetDelta {self.last_offset_delta} does not match "
                f"{self.records_count} records", corrupt=False)
        actual = self.compute_crc()
        if actual != self.crc:
            raise RecordBatchError(f"record batch CRC mismatch: stored {self.crc:#010x}, computed {actual:#010x}")

    def __repr__(self) -> str:
        return (f"RecordBatchHeader(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"size={self.size}, pid={self.producer_id}, epoch={self.producer_epoch}, "
                f"seq={self.base_sequence}, attrs={self.attributes:#x})")


def iter_batches(buffer: bytes | bytearray | memoryview, *, validate: bool = False,
                 max_size: int | None = None) -> Iterator[RecordBatchHeader]:
    """Yield each batch of a Records blob; a truncated batch raises RecordBatchError."""
    position = 0
    total = len(buffer)
    while position < total:
        header = RecordBatchHeader(buffer, position)
        if validate:
            header.validate(max_size)
        elif header.end > total or header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise RecordBatchError("record batch truncated")
        yield header
        position = header.end


def set_base_offset(buffer: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Assign the offset: baseOffset is outside the CRC, so the batch stays valid."""
    _OFFSET.pack_into(buffer, position, base_offset)


def set_partition_leader_epoch(buffer: bytearray | memoryview, position: int, epoch: int) -> None:
    _LEADER_EPOCH.pack_into(buffer, position + 12, epoch)


# -- records inside a batch -------------------------------------------------------------------


@dataclass(slots=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = field(default_factory=tuple)
    timestamp: int = -1  # absolute, filled on decode; on build -1 means "the batch's timestamp"
    offset: int = -1  # absolute, filled on decode


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    if pos < len(buf) and buf[pos] < 0x80:  # one byte, as most lengths and deltas are: inline
        b = buf[pos]
        return (b >> 1) ^ -(b & 1), pos + 1
    return read_varint(buf, pos, error=RecordBatchError)


def _read_bytes(buf: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise RecordBatchError("record field runs past the end of the batch")
    return bytes(buf[pos : pos + length]), pos + length


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    if codec == COMPRESSION_NONE:
        return bytes(data)
    try:
        if codec == COMPRESSION_GZIP:
            return zlib.decompress(bytes(data), 16 + zlib.MAX_WBITS)
        if codec == COMPRESSION_SNAPPY:
            raw = bytes(data)
            if raw.startswith(_XERIAL_MAGIC):  # Java and kafka-python frame snappy in xerial blocks
                out = bytearray()
                pos = 16
                while pos < len(raw):
                    (n,) = struct.unpack_from(">i", raw, pos)
                    out += bytes(cramjam.snappy.decompress_raw(raw[pos + 4 : pos + 4 + n]))
                    pos += 4 + n
                return bytes(out)
            return bytes(cramjam.snappy.decompress_raw(raw))
        if codec == COMPRESSION_LZ4:
            return bytes(cramjam.lz4.decompress(bytes(data)))
        if codec == COMPRESSION_ZSTD:
            return bytes(cramjam.zstd.decompress(bytes(data)))
    except RecordBatchError:
        raise
    except Exception as exc:  # the codecs raise their own types
        raise RecordBatchError(f"cannot decompress {COMPRESSION_NAMES.get(codec, codec)} batch: {exc}") from exc
    raise RecordBatchError(f"unknown compression codec {codec}", corrupt=False)


def compress(codec: int, data: bytes) -> bytes:
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == COMPRESSION_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == COMPRESSION_LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression codec {codec}")


def decode_records(header: RecordBatchHeader) -> list[Record]:
    """Decode (and decompress) every record of a batch, with absolute offsets and timestamps."""
    body = memoryview(header.buffer)[header.position + HEADER_SIZE : header.end]
    data = decompress(header.compression, body)
    records: list[Record] = []
    pos = 0
    for _ in range(header.records_count):
        length, pos = _read_varint(data, pos)
        end = pos + length
        if length < 0 or end > len(data):
            raise RecordBatchError("record length runs past the end of the batch")
        pos += 1  # attributes, unused
        ts_delta, pos = _read_varint(data, pos)
        offset_delta, pos = _read_varint(data, pos)
        key, pos = _read_bytes(data, pos)
        value, pos = _read_bytes(data, pos)
        n_headers, pos = _read_varint(data, pos)
        if n_headers < 0:
            raise RecordBatchError("negative record header count")
        hdrs = []
        for _ in range(n_headers):
            hkey, pos = _read_bytes(data, pos)
            hval, pos = _read_bytes(data, pos)
            hdrs.append(((hkey or b"").decode("utf-8", "replace"), hval))
        if pos != end:
            raise RecordBatchError("record length disagrees with its contents")
        records.append(Record(key, value, tuple(hdrs), header.base_timestamp + ts_delta,
                              header.base_offset + offset_delta))
    if pos != len(data):
        raise RecordBatchError("bytes left over after the last record of a batch")
    return records


def iter_keys_values(header: RecordBatchHeader) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of each record of a batch: what the replay of a compacted topic
    needs, without the timestamps and headers that decode_records builds objects for."""
    body = memoryview(header.buffer)[header.position + HEADER_SIZE : header.end]
    data = decompress(header.compression, body)
    pos = 0
    for _ in range(header.records_count):
        length, pos = _read_varint(data, pos)
        end = pos + length
        if length < 0 or end > len(data):
            raise RecordBatchError("record length runs past the end of the batch")
        _ts_delta, pos = _read_varint(data, pos + 1)  # after the attributes byte
        offset_delta, pos = _read_varint(data, pos)
        key, pos = _read_bytes(data, pos)
        value, pos = _read_bytes(data, pos)
        if pos > end:
            raise RecordBatchError("record length disagrees with its contents")
        yield header.base_offset + offset_delta, key, value
        pos = end


def _encode_record(out: bytearray, offset_delta: int, ts_delta: int, rec: Record) -> None:
    body = bytearray(b"\x00")
    write_varint(body, ts_delta)
    write_varint(body, offset_delta)
    for item in (rec.key, rec.value):
        if item is None:
            body.append(1)  # the varint of -1: null
        else:
            write_varint(body, len(item))
            body += item
    if not rec.headers:
        body.append(0)  # no headers: the coordinators' records, most clients' too
    else:
        write_varint(body, len(rec.headers))
        for hkey, hval in rec.headers:
            kb = hkey.encode()
            write_varint(body, len(kb))
            body += kb
            if hval is None:
                body.append(1)
            else:
                write_varint(body, len(hval))
                body += hval
    write_varint(out, len(body))
    out += body


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    timestamp: int,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    compression: int = COMPRESSION_NONE,
    partition_leader_epoch: int = 0,
) -> bytes:
    """Encode records into one magic-2 batch with a correct CRC-32C."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    stamps = [timestamp if r.timestamp < 0 else r.timestamp for r in records]
    base_ts = stamps[0]
    # Uncompressed records are encoded straight after the header's room: no copy of the body
    # (the coordinators' one-record batches, issue 19).
    buf = bytearray(HEADER_SIZE)
    body = buf if compression == COMPRESSION_NONE else bytearray()
    for i, (rec, ts) in enumerate(zip(records, stamps, strict=True)):
        _encode_record(body, i, ts - base_ts, rec)
    if body is not buf:
        buf += compress(compression, bytes(body))
    attributes = compression
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    _HEADER.pack_into(buf, 0, base_offset, len(buf) - LOG_OVERHEAD, partition_leader_epoch, MAGIC,
                      0, attributes, len(records) - 1, base_ts, max(stamps), producer_id,
                      producer_epoch, base_sequence, len(records))
    _CRC.pack_into(buf, 17, crc32c.crc32c(memoryview(buf)[21:]))
    return bytes(buf)


class OwnBatch(NamedTuple):
    """A batch this broker built itself, with its header: `PartitionLog.append_own` appends it
    without parsing it again or checking its CRC (issue 19: the coordinators' records and the
    markers are most of a small transaction's appends). Make one only of bytes a builder here
    (or log.markers) has just returned, with `OwnBatch.of`; a client's batch never becomes one:
    it goes through `PartitionLog.append`, which checks everything."""

    data: bytes
    header: RecordBatchHeader

    @classmethod
    def of(cls, data: bytes) -> OwnBatch:
        return cls(data, RecordBatchHeader(data))


def build_own_batch(records: Sequence[Record], *, timestamp: int,
                    producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                    base_sequence: int = NO_SEQUENCE, transactional: bool = False) -> OwnBatch:
    """`build_batch` for the broker's own records (uncompressed), ready for `append_own`."""
    if len(records) == 1 and not records[0].headers:
        rec = records[0]
        data = build_single_record_batch(
            rec.key, rec.value, timestamp=timestamp if rec.timestamp < 0 else rec.timestamp,
            producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
            attributes=ATTR_TRANSACTIONAL if transactional else 0)
    else:
        data = build_batch(records, timestamp=timestamp, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=base_sequence,
                           transactional=transactional)
    return OwnBatch.of(data)


def build_single_record_batch(key: bytes | None, value: bytes | None, *, timestamp: int,
                              producer_id: int = NO_PRODUCER_ID,
                              producer_epoch: int = NO_PRODUCER_EPOCH,
                              base_sequence: int = NO_SEQUENCE, attributes: int = 0) -> bytes:
    """The bytes `build_batch` makes of one uncompressed record without headers, built in one
    pass: the coordinators' records and the markers, most of a small transaction's appends
    (issue 19). `attributes`: ATTR_TRANSACTIONAL and ATTR_CONTROL, as the batch needs them."""
    # The record: length, attributes 0, timestamp delta 0, offset delta 0, key, value, no headers.
    body = bytearray(b"\x00\x00\x00")
    if key is None:
        body.append(1)  # the varint of -1: null
    else:
        write_varint(body, len(key))
        body += key
    if value is None:
        body.append(1)
    else:
        write_varint(body, len(value))
        body += value
    body.append(0)
    buf = bytearray(HEADER_SIZE)
    write_varint(buf, len(body))
    buf += body
    _HEADER.pack_into(buf, 0, 0, len(buf) - LOG_OVERHEAD, 0, MAGIC, 0, attributes, 0, timestamp,
                      timestamp, producer_id, producer_epoch, base_sequence, 1)
    _CRC.pack_into(buf, 17, crc32c.crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def rebuild_batch(header: RecordBatchHeader, records: Sequence[Record]) -> bytes:
    """The batch of `header` holding only `records` (some of its own, as decode_records gave
    them), for the log cleaner. Everything the batch says about itself stays: base offset, last
    offset delta (so the producer's last sequence survives, as Kafka's cleaner keeps it),
    timestamps, producer id, epoch, base sequence, attributes; each record keeps its offset and
    timestamp. With no record left the batch is empty (records count 0, not compressed): what a
    cleaner keeps of a producer's last batch."""
    body = bytearray()
    for rec in records:
        _encode_record(body, rec.offset - header.base_offset, rec.timestamp - header.base_timestamp,
                       rec)
    attributes = header.attributes
    if records:
        payload = compress(header.compression, bytes(body))
    else:
        payload = b""
        attributes &= ~ATTR_COMPRESSION_MASK
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    buf = bytearray(HEADER_SIZE) + payload
    _HEADER.pack_into(buf, 0, header.base_offset, batch_length, header.partition_leader_epoch, MAGIC,
                      0, attributes, header.last_offset_delta, header.base_timestamp,
                      header.max_timestamp, header.producer_id, header.producer_epoch,
                      header.base_sequence, len(records))
    struct.pack_into(">I", buf, 17, crc32c.crc32c(memoryview(buf)[21:]))
    return bytes(buf)
