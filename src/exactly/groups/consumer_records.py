"""The KIP-848 consumer-group records of `__consumer_offsets`, in Kafka's own byte layout.

Kafka's group coordinator keeps a consumer group as five record types (the JSON files
`ConsumerGroup*Key/Value.json` of `group-coordinator/src/main/resources/common/message`); the key
version is the record type:

    3  ConsumerGroupMetadata            group            epoch (+ tagged MetadataHash, KIP-1101)
    5  ConsumerGroupMemberMetadata      group, member    subscription, client, rebalance timeout
    6  ConsumerGroupTargetAssignmentMetadata  group      the target assignment's epoch
    7  ConsumerGroupTargetAssignmentMember    group, member  the member's target partitions
    8  ConsumerGroupCurrentMemberAssignment   group, member  epochs, state, assigned and pending

Keys are non-flexible (int16 version, int16-length strings); values are an int16 version (0)
then a flexible struct (compact strings and arrays, tagged fields). A None value is a tombstone.
Type 4 (ConsumerGroupPartitionMetadata, Kafka before 4.1) is read and ignored: like Kafka 4.1 we
keep a hash of the subscribed topics' metadata in the group record instead.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from exactly.groups.assignors import Assignment
from exactly.groups.consumer_group import ClassicMetadata
from exactly.protocol.primitives import Reader, Writer, write_uvarint

GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA = 3, 4, 5
TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = 6, 7, 8
CONSUMER_KEY_TYPES = (GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_METADATA,
                      TARGET_MEMBER, CURRENT_ASSIGNMENT)
_MEMBER_KEY_TYPES = (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT)


class ConsumerRecordError(ValueError):
    """A consumer-group record of `__consumer_offsets` that cannot be decoded."""


@dataclass(frozen=True, slots=True)
class ConsumerKey:
    record_type: int
    group_id: str
    member_id: str = ""  # for the member record types


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMetadata | None = None  # tagged field 0: a classic-protocol member


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState's byte: 0 stable, 1 unrevoked, 2 unreleased partitions
    assigned: Assignment
    pending_revocation: Assignment


ConsumerValue = GroupMetadataValue | MemberMetadataValue | int | Assignment | CurrentAssignmentValue


# -- keys -----------------------------------------------------------------------------------


def encode_key(key: ConsumerKey) -> bytes:
    w = Writer().i16(key.record_type).string(key.group_id)
    if key.record_type in _MEMBER_KEY_TYPES:
        w.string(key.member_id)
    return bytes(w.out)


def decode_consumer_key(version: int, r: Reader) -> ConsumerKey:
    """The rest of a key whose int16 version (record type) was read already."""
    group_id = r.string() or ""
    member_id = (r.string() or "") if version in _MEMBER_KEY_TYPES else ""
    return ConsumerKey(version, group_id, member_id)


# -- flexible writing -----------------------------------------------------------------------


class _Flex:
    def __init__(self, *, versioned: bool = True) -> None:
        self.w = Writer()
        if versioned:
            self.w.i16(0)  # every value is version 0

    def string(self, value: str | None) -> _Flex:
        if value is None:
            write_uvarint(self.w.out, 0)
        else:
            raw = value.encode()
            write_uvarint(self.w.out, len(raw) + 1)
            self.w.out += raw
        return self

    def strings(self, values: tuple[str, ...]) -> _Flex:
        write_uvarint(self.w.out, len(values) + 1)
        for v in values:
            self.string(v)
        return self

    def partitions(self, assignment: Assignment) -> _Flex:
        write_uvarint(self.w.out, len(assignment) + 1)
        for topic_id in sorted(assignment, key=str):
            self.w.out += topic_id.bytes
            parts = sorted(assignment[topic_id])
            write_uvarint(self.w.out, len(parts) + 1)
            for p in parts:
                self.w.i32(p)
            self.no_tags()
        return self

    def no_tags(self) -> _Flex:
        write_uvarint(self.w.out, 0)
        return self

    def done(self) -> bytes:
        self.no_tags()
        return bytes(self.w.out)


def encode_group_metadata(v: GroupMetadataValue) -> bytes:
    f = _Flex()
    f.w.i32(v.epoch)
    # Tagged field 0: MetadataHash.
    write_uvarint(f.w.out, 1)
    write_uvarint(f.w.out, 0)
    write_uvarint(f.w.out, 8)
    f.w.i64(v.metadata_hash)
    return bytes(f.w.out)


def encode_member_metadata(v: MemberMetadataValue) -> bytes:
    f = _Flex().string(v.instance_id).string(v.rack_id).string(v.client_id)
    f.string(v.client_host).strings(v.subscribed_topic_names).string(v.subscribed_topic_regex)
    f.w.i32(v.rebalance_timeout_ms)
    f.string(v.server_assignor)
    if v.classic is None:
        return f.done()
    # Tagged field 0, ClassicMemberMetadata: SessionTimeoutMs, SupportedProtocols [Name, Metadata].
    inner = _Flex(versioned=False)
    inner.w.i32(v.classic.session_timeout_ms)
    write_uvarint(inner.w.out, len(v.classic.protocols) + 1)
    for name, metadata in v.classic.protocols:
        inner.string(name)
        write_uvarint(inner.w.out, len(metadata) + 1)
        inner.w.out += metadata
        inner.no_tags()
    inner.no_tags()
    write_uvarint(f.w.out, 1)
    write_uvarint(f.w.out, 0)
    write_uvarint(f.w.out, len(inner.w.out))
    f.w.out += inner.w.out
    return bytes(f.w.out)


def _classic(raw: bytes) -> ClassicMetadata:
    r = Reader(raw, error=ConsumerRecordError)
    session = r.i32()
    protocols = []
    for _ in range(_array_len(r)):
        name = _string(r) or ""
        metadata = r.take(_array_len(r))
        r.tagged_fields()
        protocols.append((name, metadata))
    return ClassicMetadata(session, tuple(protocols))


def encode_target_metadata(assignment_epoch: int) -> bytes:
    f = _Flex()
    f.w.i32(assignment_epoch)
    return f.done()


def encode_target_member(assignment: Assignment) -> bytes:
    return _Flex().partitions(assignment).done()


def encode_current_assignment(v: CurrentAssignmentValue) -> bytes:
    f = _Flex()
    f.w.i32(v.member_epoch).i32(v.previous_member_epoch).i8(v.state)
    return f.partitions(v.assigned).partitions(v.pending_revocation).done()


# -- flexible reading -----------------------------------------------------------------------


def _string(r: Reader) -> str | None:
    return r.compact_string()


def _array_len(r: Reader) -> int:
    n = r.uvarint() - 1
    if n < 0:
        raise ConsumerRecordError("null array where an array is required")
    return n


def _partitions(r: Reader) -> Assignment:
    result: Assignment = {}
    for _ in range(_array_len(r)):
        topic_id = uuid.UUID(bytes=r.take(16))
        parts = frozenset(r.i32() for _ in range(_array_len(r)))
        r.tagged_fields()
        if parts:
            result[topic_id] = parts
    return result


def decode_consumer_value(record_type: int, data: bytes) -> ConsumerValue | None:
    """The value of a record of `record_type`; None for type 4, which we do not use."""
    r = Reader(data, error=ConsumerRecordError)
    version = r.i16()
    if version != 0:
        raise ConsumerRecordError(f"unsupported value version {version} of record type "
                                  f"{record_type}")
    if record_type == GROUP_METADATA:
        epoch = r.i32()
        tags = r.tagged_fields()
        raw = tags.get(0)
        metadata_hash = Reader(raw, error=ConsumerRecordError).i64() if raw else 0
        return GroupMetadataValue(epoch, metadata_hash)
    if record_type == MEMBER_METADATA:
        instance_id, rack_id = _string(r), _string(r)
        client_id, client_host = _string(r) or "", _string(r) or ""
        names = tuple(_string(r) or "" for _ in range(_array_len(r)))
        regex = _string(r)
        rebalance_timeout = r.i32()
        assignor = _string(r)
        classic = r.tagged_fields().get(0)
        return MemberMetadataValue(instance_id, rack_id, client_id, client_host, names, regex,
                                   rebalance_timeout, assignor,
                                   _classic(classic) if classic is not None else None)
    if record_type == TARGET_METADATA:
        return r.i32()
    if record_type == TARGET_MEMBER:
        return _partitions(r)
    if record_type == CURRENT_ASSIGNMENT:
        epoch, previous, state = r.i32(), r.i32(), r.i8()
        return CurrentAssignmentValue(epoch, previous, state, _partitions(r), _partitions(r))
    return None
