"""Keys and values of the `__consumer_offsets` records, in Kafka's own byte layout.

Using Kafka's layout (OffsetCommitKey/Value, GroupMetadataKey/Value from the Kafka source's
`group-coordinator/src/main/resources/common/message/*.json`) means Kafka tools that decode this
topic understand it. The KIP-848 consumer-group records are in consumer_records.py. We write the newest non-flexible versions (offset key v1, offset value v3,
group key v2, group value v3) and read every older non-flexible version. A value of None is a
tombstone: the offset or the group was deleted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exactly.groups.consumer_records import CONSUMER_KEY_TYPES, ConsumerKey, decode_consumer_key
from exactly.protocol.primitives import Reader, Writer

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberValue, ...] = field(default_factory=tuple)


# -- writing --------------------------------------------------------------------------------


def encode_offset_key(key: OffsetKey) -> bytes:
    w = Writer().i16(OFFSET_KEY_VERSION).string(key.group_id).string(key.topic)
    return bytes(w.i32(key.partition).out)


def encode_group_key(key: GroupKey) -> bytes:
    return bytes(Writer().i16(GROUP_KEY_VERSION).string(key.group_id).out)


def encode_offset_value(v: OffsetValue) -> bytes:
    w = Writer().i16(OFFSET_VALUE_VERSION).i64(v.offset).i32(v.leader_epoch)
    return bytes(w.string(v.metadata).i64(v.commit_timestamp).out)


def encode_group_value(v: GroupValue) -> bytes:
    w = Writer().i16(GROUP_VALUE_VERSION).string(v.protocol_type).i32(v.generation_id)
    w.string(v.protocol_name).string(v.leader_id).i64(v.current_state_timestamp)
    w.i32(len(v.members))
    for m in v.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id)
        w.string(m.client_host).i32(m.rebalance_timeout_ms).i32(m.session_timeout_ms)
        w.bytes_(m.subscription).bytes_(m.assignment)
    return bytes(w.out)


# -- reading --------------------------------------------------------------------------------


class CodecError(ValueError):
    """A record of `__consumer_offsets` this coordinator cannot decode."""


def decode_key(data: bytes) -> OffsetKey | GroupKey | ConsumerKey:
    r = Reader(data, error=CodecError)
    version = r.i16()
    if version in (0, 1):
        group, topic = r.string() or "", r.string() or ""
        return OffsetKey(group, topic, r.i32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(r.string() or "")
    if version in CONSUMER_KEY_TYPES:  # KIP-848 consumer groups (consumer_records.py)
        return decode_consumer_key(version, r)
    raise CodecError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    r = Reader(data, error=CodecError)
    version = r.i16()
    if version > OFFSET_VALUE_VERSION:
        raise CodecError(f"unsupported offset commit value version {version}")
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    commit_timestamp = r.i64()
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp)


def decode_group_value(data: bytes) -> GroupValue:
    r = Reader(data, error=CodecError)
    version = r.i16()
    if version > GROUP_VALUE_VERSION:
        raise CodecError(f"unsupported group metadata value version {version}")
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol, leader = r.string(), r.string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.string() or ""
        instance_id = r.string() if version >= 3 else None
        client_id, client_host = r.string() or "", r.string() or ""
        session_timeout = r.i32()
        rebalance_timeout = r.i32() if version >= 1 else session_timeout
        if version >= 1:
            # v1+ puts rebalance_timeout before session_timeout: swap what we read.
            session_timeout, rebalance_timeout = rebalance_timeout, session_timeout
        members.append(MemberValue(member_id, instance_id, client_id, client_host,
                                   rebalance_timeout, session_timeout,
                                   r.bytes_() or b"", r.bytes_() or b""))
    return GroupValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))
