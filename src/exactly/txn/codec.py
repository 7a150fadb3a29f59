"""Keys and values of the `__transaction_state` records, in Kafka's own byte layout.

TransactionLogKey (version 0, not flexible): int16 version, string transactional_id.
TransactionLogValue (from Kafka's `transaction-coordinator/.../TransactionLogValue.json`):
version 0 is the classic layout of KIP-98; version 1 is flexible (KIP-915/KIP-890) and adds the
tagged fields PrevProducerId (tag 0), NextProducerId (tag 1) and ClientTransactionVersion (tag 2).
KIP-939 adds NextProducerEpoch. The seed gives it tag 2, but Apache Kafka's schema (and every
record Exactly wrote before) already has ClientTransactionVersion on tag 2, so it goes on the next
free tag, 3: an int16 on tag 2 would be misread either way.
KIP-1309's session timeout (InitProducerId v7) is Exactly's own tagged field, on tag 1309 (the
KIP's number, far from the small tags Kafka hands out): Kafka's reader skips a tag it does not know.
We write version 1 and read both. A value of None is a tombstone: the transactional id expired.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from exactly.protocol.primitives import (
    I16,
    I32,
    I64,
    Reader,
    Writer,
    write_compact_string,
    write_uvarint,
)

KEY_VERSION = 0
VALUE_VERSION = 1

_TAG_PREV_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TXN_VERSION = 2
_TAG_NEXT_PRODUCER_EPOCH = 3
_TAG_SESSION_TIMEOUT = 1309


class TxnCodecError(ValueError):
    """A `__transaction_state` record that cannot be decoded."""


class TxnLogValue(NamedTuple):
    """One TransactionLogValue. A NamedTuple, not a frozen dataclass: three are made per
    transaction, and a frozen dataclass sets each of its 13 fields through object.__setattr__."""

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
    session_timeout_ms: int = -1


# -- writing --------------------------------------------------------------------------------

# TxnLogValue's tagged fields are its last five, each left out of a record while at its default.
_FIRST_TAGGED = TxnLogValue._fields.index("prev_producer_id")
_TAG_DEFAULTS = tuple(TxnLogValue._field_defaults[name]
                      for name in TxnLogValue._fields[_FIRST_TAGGED:])


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return _KEY_HEADER.pack(KEY_VERSION, len(raw)) + raw


# Three of these are written per transaction (Ongoing, PrepareX, CompleteX): packed with whole
# structs and the bytearray-level primitives, not field by field through a Writer.
_KEY_HEADER = struct.Struct(">hh")  # version, length of the transactional id
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")  # last update, start


def encode_value(v: TxnLogValue, version: int = VALUE_VERSION) -> bytes:
    if version == 0:
        return _encode_value_v0(v)
    if version != 1:
        raise ValueError(f"TransactionLogValue version {version} is not supported (0 or 1)")
    out = bytearray(_VALUE_HEAD.pack(1, v.producer_id, v.producer_epoch, v.txn_timeout_ms,
                                     v.status))
    if v.partitions is None:
        out.append(0)  # a null compact array (Empty)
    else:
        write_uvarint(out, len(v.partitions) + 1)
        for topic, ids in v.partitions:
            write_compact_string(out, topic)
            write_uvarint(out, len(ids) + 1)
            out += struct.pack(f">{len(ids)}i", *ids)
            out.append(0)  # the entry's own (empty) tagged-field section
    out += _TIMES.pack(v.last_update_ms, v.start_ms)
    if v[_FIRST_TAGGED:] == _TAG_DEFAULTS:  # no tagged field: an older client's transactions
        out.append(0)
        return bytes(out)
    # Tagged fields, ascending by tag; a field equal to its default is left out.
    tags: list[tuple[int, bytes]] = []
    if v.prev_producer_id != -1:
        tags.append((_TAG_PREV_PRODUCER_ID, I64.pack(v.prev_producer_id)))
    if v.next_producer_id != -1:
        tags.append((_TAG_NEXT_PRODUCER_ID, I64.pack(v.next_producer_id)))
    if v.client_transaction_version != 0:
        tags.append((_TAG_CLIENT_TXN_VERSION, I16.pack(v.client_transaction_version)))
    if v.next_producer_epoch != -1:
        tags.append((_TAG_NEXT_PRODUCER_EPOCH, I16.pack(v.next_producer_epoch)))
    if v.session_timeout_ms != -1:
        tags.append((_TAG_SESSION_TIMEOUT, I32.pack(v.session_timeout_ms)))
    write_uvarint(out, len(tags))
    for tag, data in tags:
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data
    return bytes(out)


def _encode_value_v0(v: TxnLogValue) -> bytes:
    w = Writer().i16(0).i64(v.producer_id).i16(v.producer_epoch).i32(v.txn_timeout_ms)
    w.i8(v.status)
    if v.partitions is None:
        w.i32(-1)
    else:
        w.i32(len(v.partitions))
        for topic, ids in v.partitions:
            w.string(topic).i32(len(ids))
            for p in ids:
                w.i32(p)
    return bytes(w.i64(v.last_update_ms).i64(v.start_ms).out)


# -- reading --------------------------------------------------------------------------------


def decode_key(data: bytes) -> str:
    r = Reader(data, error=TxnCodecError)
    version = r.i16()
    if version != KEY_VERSION:
        raise TxnCodecError(f"unknown TransactionLogKey version {version}")
    return r.required_string()


def decode_value(data: bytes) -> TxnLogValue:
    r = Reader(data, error=TxnCodecError)
    version = r.i16()
    if version == 0:
        return _decode_value_v0(r)
    if version != 1:
        raise TxnCodecError(f"unknown TransactionLogValue version {version}")
    producer_id, epoch, timeout, status = r.i64(), r.i16(), r.i32(), r.i8()
    n = r.uvarint() - 1
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    if n >= 0:
        entries = []
        for _ in range(n):
            topic = r.required_compact_string()
            ids = _partition_ids(r, r.uvarint() - 1)
            r.tagged_fields()  # none are defined on the entry; unknown ones are skipped
            entries.append((topic, ids))
        partitions = tuple(entries)
    last_update, start = r.i64(), r.i64()
    tags = r.tagged_fields()
    prev = _tag_int(tags, _TAG_PREV_PRODUCER_ID, I64, -1)
    nxt = _tag_int(tags, _TAG_NEXT_PRODUCER_ID, I64, -1)
    ctv = _tag_int(tags, _TAG_CLIENT_TXN_VERSION, I16, 0)
    next_epoch = _tag_int(tags, _TAG_NEXT_PRODUCER_EPOCH, I16, -1)
    session = _tag_int(tags, _TAG_SESSION_TIMEOUT, I32, -1)
    return TxnLogValue(producer_id, epoch, timeout, status, partitions, last_update, start, prev,
                       nxt, ctv, next_epoch, session)


def _partition_ids(r: Reader, count: int) -> tuple[int, ...]:
    return tuple(r.i32() for _ in range(count))


def _tag_int(tags: dict[int, bytes], tag: int, layout: struct.Struct, default: int) -> int:
    data = tags.get(tag)
    if data is None:
        return default
    if len(data) != layout.size:
        raise TxnCodecError(f"tagged field {tag} has {len(data)} bytes")
    (value,) = layout.unpack(data)
    return int(value)


def _decode_value_v0(r: Reader) -> TxnLogValue:
    producer_id, epoch, timeout, status = r.i64(), r.i16(), r.i32(), r.i8()
    n = r.i32()
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    if n >= 0:
        entries = []
        for _ in range(n):
            topic = r.required_string()
            entries.append((topic, _partition_ids(r, r.i32())))
        partitions = tuple(entries)
    last_update, start = r.i64(), r.i64()
    return TxnLogValue(producer_id, epoch, timeout, status, partitions, last_update, start)
