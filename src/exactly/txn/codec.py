"""Keys and values of the `__transaction_state` records, in Kafka's own byte layout.

TransactionLogKey (version 0, not flexible): int16 version, string transactional_id.
TransactionLogValue (from Kafka's `transaction-coordinator/.../TransactionLogValue.json`):
version 0 is the classic layout of KIP-98; version 1 is flexible (KIP-915/KIP-890) and adds the
tagged fields PrevProducerId (tag 0), NextProducerId (tag 1) and ClientTransactionVersion (tag 2).
KIP-939 adds NextProducerEpoch. The seed gives it tag 2, but Apache Kafka's schema (and every
record Exactly wrote before) already has ClientTransactionVersion on tag 2, so it goes on the next
free tag, 3: an int16 on tag 2 would be misread either way.
We write version 1 and read both. A value of None is a tombstone: the transactional id expired.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

KEY_VERSION = 0
VALUE_VERSION = 1

_TAG_PREV_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TXN_VERSION = 2
_TAG_NEXT_PRODUCER_EPOCH = 3


class TxnCodecError(ValueError):
    """A `__transaction_state` record that cannot be decoded."""


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    status: int  # the state's byte value (TxnState)
    # None is written for Empty, as Kafka does; otherwise (topic, partition ids) per topic.
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    last_update_ms: int
    start_ms: int
    prev_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0
    next_producer_epoch: int = -1


# -- writing --------------------------------------------------------------------------------


def _uvarint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _compact_string(out: bytearray, s: str) -> None:
    b = s.encode()
    _uvarint(out, len(b) + 1)
    out += b


def encode_key(transactional_id: str) -> bytes:
    b = transactional_id.encode()
    return struct.pack(">hh", KEY_VERSION, len(b)) + b


def encode_value(v: TxnLogValue, version: int = VALUE_VERSION) -> bytes:
    if version == 0:
        return _encode_value_v0(v)
    if version != 1:
        raise ValueError(f"TransactionLogValue version {version} is not supported (0 or 1)")
    out = bytearray(struct.pack(">hq", 1, v.producer_id))
    out += struct.pack(">hib", v.producer_epoch, v.txn_timeout_ms, v.status)
    if v.partitions is None:
        _uvarint(out, 0)
    else:
        _uvarint(out, len(v.partitions) + 1)
        for topic, ids in v.partitions:
            _compact_string(out, topic)
            _uvarint(out, len(ids) + 1)
            for p in ids:
                out += struct.pack(">i", p)
            _uvarint(out, 0)  # the entry's own (empty) tagged-field section
    out += struct.pack(">qq", v.last_update_ms, v.start_ms)
    # Tagged fields, ascending by tag; a field equal to its default is left out.
    tags: list[tuple[int, bytes]] = []
    if v.prev_producer_id != -1:
        tags.append((_TAG_PREV_PRODUCER_ID, struct.pack(">q", v.prev_producer_id)))
    if v.next_producer_id != -1:
        tags.append((_TAG_NEXT_PRODUCER_ID, struct.pack(">q", v.next_producer_id)))
    if v.client_transaction_version != 0:
        tags.append((_TAG_CLIENT_TXN_VERSION, struct.pack(">h", v.client_transaction_version)))
    if v.next_producer_epoch != -1:
        tags.append((_TAG_NEXT_PRODUCER_EPOCH, struct.pack(">h", v.next_producer_epoch)))
    _uvarint(out, len(tags))
    for tag, data in tags:
        _uvarint(out, tag)
        _uvarint(out, len(data))
        out += data
    return bytes(out)


def _encode_value_v0(v: TxnLogValue) -> bytes:
    out = bytearray(struct.pack(">hqhib", 0, v.producer_id, v.producer_epoch, v.txn_timeout_ms,
                                v.status))
    if v.partitions is None:
        out += struct.pack(">i", -1)
    else:
        out += struct.pack(">i", len(v.partitions))
        for topic, ids in v.partitions:
            b = topic.encode()
            out += struct.pack(">h", len(b)) + b
            out += struct.pack(">i", len(ids))
            for p in ids:
                out += struct.pack(">i", p)
    out += struct.pack(">qq", v.last_update_ms, v.start_ms)
    return bytes(out)


# -- reading --------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise TxnCodecError(f"record ends early: wanted {n} bytes at {self.pos} of "
                                f"{len(self.data)}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt: str) -> tuple[int, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise TxnCodecError("unsigned varint is too long")

    def string(self) -> str:
        (n,) = self.unpack(">h")
        if n < 0:
            raise TxnCodecError("null string where a string is required")
        return self.take(n).decode()

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise TxnCodecError("null compact string where a string is required")
        return self.take(n).decode()

    def tagged_fields(self) -> dict[int, bytes]:
        fields: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self.take(self.uvarint())
        return fields


def decode_key(data: bytes) -> str:
    r = _Reader(data)
    (version,) = r.unpack(">h")
    if version != KEY_VERSION:
        raise TxnCodecError(f"unknown TransactionLogKey version {version}")
    return r.string()


def decode_value(data: bytes) -> TxnLogValue:
    r = _Reader(data)
    (version,) = r.unpack(">h")
    if version == 0:
        return _decode_value_v0(r)
    if version != 1:
        raise TxnCodecError(f"unknown TransactionLogValue version {version}")
    producer_id, epoch, timeout, status = r.unpack(">qhib")
    n = r.uvarint() - 1
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    if n >= 0:
        entries = []
        for _ in range(n):
            topic = r.compact_string()
            count = r.uvarint() - 1
            ids = tuple(r.unpack(f">{count}i")) if count > 0 else ()
            r.tagged_fields()  # none are defined on the entry; unknown ones are skipped
            entries.append((topic, ids))
        partitions = tuple(entries)
    last_update, start = r.unpack(">qq")
    tags = r.tagged_fields()
    prev = _tag_int(tags, _TAG_PREV_PRODUCER_ID, ">q", -1)
    nxt = _tag_int(tags, _TAG_NEXT_PRODUCER_ID, ">q", -1)
    ctv = _tag_int(tags, _TAG_CLIENT_TXN_VERSION, ">h", 0)
    next_epoch = _tag_int(tags, _TAG_NEXT_PRODUCER_EPOCH, ">h", -1)
    return TxnLogValue(producer_id, epoch, timeout, status, partitions, last_update, start, prev,
                       nxt, ctv, next_epoch)


def _tag_int(tags: dict[int, bytes], tag: int, fmt: str, default: int) -> int:
    data = tags.get(tag)
    if data is None:
        return default
    if len(data) != struct.calcsize(fmt):
        raise TxnCodecError(f"tagged field {tag} has {len(data)} bytes")
    (value,) = struct.unpack(fmt, data)
    return int(value)


def _decode_value_v0(r: _Reader) -> TxnLogValue:
    producer_id, epoch, timeout, status = r.unpack(">qhib")
    (n,) = r.unpack(">i")
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    if n >= 0:
        entries = []
        for _ in range(n):
            topic = r.string()
            (count,) = r.unpack(">i")
            ids = tuple(r.unpack(f">{count}i")) if count > 0 else ()
            entries.append((topic, ids))
        partitions = tuple(entries)
    last_update, start = r.unpack(">qq")
    return TxnLogValue(producer_id, epoch, timeout, status, partitions, last_update, start)
