"""The records of `__share_group_state`, in Kafka's layout (share-coordinator's
ShareSnapshotKey/Value and ShareUpdateKey/Value, KIP-932), plus one record of Exactly's own.

A key starts with its INT16 type (Kafka's "key version"): 0 ShareSnapshotKey, 1 ShareUpdateKey;
both hold GroupId (STRING), TopicId (UUID), Partition (INT32), not flexible. A value starts with
its INT16 version (0) and is flexible (compact arrays, tagged fields):

    ShareSnapshotValue  SnapshotEpoch i32, StateEpoch i32, LeaderEpoch i32, StartOffset i64,
                        CreateTimestamp i64, WriteTimestamp i64, StateBatches[]
    ShareUpdateValue    SnapshotEpoch i32, LeaderEpoch i32, StartOffset i64, StateBatches[]
    StateBatch          FirstOffset i64, LastOffset i64, DeliveryState i8, DeliveryCount i16

A None value (tombstone) deletes the share-partition's state (DeleteShareGroupState).

Type 100, ShareGroupConfigKey (GroupId) -> value (version 0, the group's config overrides as
name/value pairs), is Exactly's own: Kafka keeps a share group's existence in `__consumer_offsets`
(ShareGroupMetadata) and its configs in the KRaft metadata log, neither of which this broker has
for share groups. It makes a group, and its configs, outlive a restart before any of its
partitions is initialized.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import TypeVar

from exactly.protocol.primitives import Reader, Writer, write_compact_string, write_uvarint
from exactly.share.partition import RecordState, StateBatch

SNAPSHOT_KEY = 0
UPDATE_KEY = 1
GROUP_CONFIG_KEY = 100
VALUE_VERSION = 0

_BATCH = struct.Struct(">qqbh")
_T = TypeVar("_T")


class ShareStateCodecError(ValueError):
    """A record of __share_group_state that cannot be decoded."""


@dataclass(frozen=True, slots=True)
class StateKey:
    kind: int  # SNAPSHOT_KEY or UPDATE_KEY
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class ShareUpdate:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int  # -1: unchanged
    batches: tuple[StateBatch, ...]


def encode_state_key(key: StateKey) -> bytes:
    w = Writer().i16(key.kind).string(key.group_id)
    w.out += key.topic_id.bytes
    return bytes(w.i32(key.partition).out)


def encode_group_key(group_id: str) -> bytes:
    return bytes(Writer().i16(GROUP_CONFIG_KEY).string(group_id).out)


def decode_key(data: bytes) -> StateKey | str:
    """A StateKey, or the group id of a ShareGroupConfigKey."""
    r = Reader(data, error=ShareStateCodecError)
    kind = r.i16()
    group_id = r.required_string()
    if kind == GROUP_CONFIG_KEY:
        return group_id
    if kind not in (SNAPSHOT_KEY, UPDATE_KEY):
        raise ShareStateCodecError(f"unknown __share_group_state key type {kind}")
    topic_id = uuid.UUID(bytes=r.take(16))
    return StateKey(kind, group_id, topic_id, r.i32())


def _write_batches(w: Writer, batches: tuple[StateBatch, ...]) -> None:
    write_uvarint(w.out, len(batches) + 1)
    for b in batches:
        w.out += _BATCH.pack(b.first_offset, b.last_offset, int(b.state), b.delivery_count)
        write_uvarint(w.out, 0)  # tagged fields


def _read_batches(r: Reader) -> tuple[StateBatch, ...]:
    n = r.uvarint() - 1
    out = []
    for _ in range(max(n, 0)):
        first, last, state, count = _BATCH.unpack(r.take(_BATCH.size))
        r.tagged_fields()
        try:
            out.append(StateBatch(first, last, RecordState(state), count))
        except ValueError:
            raise ShareStateCodecError(f"unknown delivery state {state}") from None
    return tuple(out)


def encode_snapshot(v: ShareSnapshot) -> bytes:
    w = Writer().i16(VALUE_VERSION).i32(v.snapshot_epoch).i32(v.state_epoch).i32(v.leader_epoch)
    w.i64(v.start_offset).i64(v.create_timestamp).i64(v.write_timestamp)
    return _end_value(w, v.batches)


def decode_snapshot(data: bytes) -> ShareSnapshot:
    r = _value_reader(data)
    return _end_read(r, ShareSnapshot(r.i32(), r.i32(), r.i32(), r.i64(), r.i64(), r.i64(),
                                      _read_batches(r)))


def encode_update(v: ShareUpdate) -> bytes:
    w = Writer().i16(VALUE_VERSION).i32(v.snapshot_epoch).i32(v.leader_epoch).i64(v.start_offset)
    return _end_value(w, v.batches)


def decode_update(data: bytes) -> ShareUpdate:
    r = _value_reader(data)
    return _end_read(r, ShareUpdate(r.i32(), r.i32(), r.i64(), _read_batches(r)))


def _end_value(w: Writer, batches: tuple[StateBatch, ...]) -> bytes:
    """The StateBatches array and the value's (empty) tagged fields."""
    _write_batches(w, batches)
    write_uvarint(w.out, 0)
    return bytes(w.out)


def _value_reader(data: bytes) -> Reader:
    r = Reader(data, error=ShareStateCodecError)
    _version(r)
    return r


def _end_read(r: Reader, value: _T) -> _T:
    r.tagged_fields()
    return value


def encode_group_configs(configs: dict[str, str]) -> bytes:
    w = Writer().i16(VALUE_VERSION)
    write_uvarint(w.out, len(configs) + 1)
    for name, value in sorted(configs.items()):
        write_compact_string(w.out, name)
        write_compact_string(w.out, value)
    return bytes(w.out)


def decode_group_configs(data: bytes) -> dict[str, str]:
    r = _value_reader(data)
    out = {}
    for _ in range(max(r.uvarint() - 1, 0)):
        name = r.required_compact_string()
        out[name] = r.required_compact_string()
    return out


def _version(r: Reader) -> None:
    version = r.i16()
    if version != VALUE_VERSION:
        raise ShareStateCodecError(f"unknown __share_group_state value version {version}")
