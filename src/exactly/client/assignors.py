"""The "consumer" protocol of the classic group protocol: the subscription and assignment bytes
every Kafka consumer (Java, librdkafka, kafka-python) writes into JoinGroup and SyncGroup, and
the range and roundrobin assignors as Kafka's own, so a group can mix this client with others.

Subscription: version int16, topics [string], user_data bytes, then (v1+) owned partitions
[topic string, partitions [int32]], (v2+) generation id int32, (v3+) rack id nullable string.
Assignment: version int16, partitions [topic string, partitions [int32]], user_data bytes.
A reader takes the fields it knows and ignores the rest, as Kafka's own parser does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from exactly.protocol.primitives import Reader, Writer

PROTOCOL_TYPE = "consumer"
STRATEGIES = ("range", "roundrobin")


class ProtocolError(ValueError):
    """Subscription or assignment bytes that cannot be read."""


@dataclass(slots=True)
class Subscription:
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: dict[str, list[int]] = field(default_factory=dict)
    group_instance_id: str | None = None  # from JoinGroup, not the bytes: orders static members


@dataclass(slots=True)
class Assignment:
    partitions: dict[str, list[int]]
    user_data: bytes | None = None


def _read_topic_partitions(reader: Reader) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for _ in range(max(reader.i32(), 0)):
        topic = reader.string() or ""
        out[topic] = [reader.i32() for _ in range(max(reader.i32(), 0))]
    return out


def _write_topic_partitions(writer: Writer, parts: Mapping[str, list[int]]) -> None:
    writer.i32(len(parts))
    for topic in sorted(parts):
        writer.string(topic).i32(len(parts[topic]))
        for p in sorted(parts[topic]):
            writer.i32(p)


def encode_subscription(sub: Subscription) -> bytes:
    """Version 1: topics, user data and the partitions owned before this rebalance."""
    writer = Writer().i16(1).i32(len(sub.topics))
    for topic in sorted(sub.topics):
        writer.string(topic)
    writer.bytes_(sub.user_data)
    _write_topic_partitions(writer, sub.owned_partitions)
    return bytes(writer.out)


def decode_subscription(data: bytes) -> Subscription:
    reader = Reader(data, error=ProtocolError)
    version = reader.i16()
    if version < 0:
        raise ProtocolError(f"bad subscription version {version}")
    topics = [reader.string() or "" for _ in range(max(reader.i32(), 0))]
    user_data = reader.bytes_() if not reader.at_end else None
    owned = _read_topic_partitions(reader) if version >= 1 and not reader.at_end else {}
    return Subscription(topics, user_data, owned)


def encode_assignment(assignment: Assignment) -> bytes:
    writer = Writer().i16(0)
    _write_topic_partitions(writer, assignment.partitions)
    writer.bytes_(assignment.user_data)
    return bytes(writer.out)


def decode_assignment(data: bytes) -> Assignment:
    if not data:
        return Assignment({})  # a member the leader gave nothing
    reader = Reader(data, error=ProtocolError)
    if reader.i16() < 0:
        raise ProtocolError("bad assignment version")
    partitions = _read_topic_partitions(reader)
    user_data = reader.bytes_() if not reader.at_end else None
    return Assignment(partitions, user_data)


def _member_order(members: Mapping[str, Subscription]) -> list[str]:
    """Kafka's MemberInfo order: by group.instance.id when both have one, else by member id."""
    return sorted(members, key=lambda m: (members[m].group_instance_id is None,
                                          members[m].group_instance_id or "", m))


def assign_range(members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
                 ) -> dict[str, dict[str, list[int]]]:
    """Kafka's RangeAssignor: per topic, consecutive ranges; the first members get one more."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    order = _member_order(members)
    for topic in sorted(partitions_per_topic):
        consumers = [m for m in order if topic in members[m].topics]
        if not consumers:
            continue
        count = partitions_per_topic[topic]
        per, extra = divmod(count, len(consumers))
        for i, member in enumerate(consumers):
            start = per * i + min(i, extra)
            length = per + (1 if i < extra else 0)
            if length:
                out[member][topic] = list(range(start, start + length))
    return out


def assign_roundrobin(members: Mapping[str, Subscription], partitions_per_topic: Mapping[str, int]
                      ) -> dict[str, dict[str, list[int]]]:
    """Kafka's RoundRobinAssignor: all partitions in topic order dealt to members in turn,
    passing over members not subscribed to the partition's topic."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    order = _member_order(members)
    if not order:
        return out
    turn = 0
    for topic in sorted(partitions_per_topic):
        if not any(topic in members[m].topics for m in order):
            continue
        for partition in range(partitions_per_topic[topic]):
            while topic not in members[order[turn % len(order)]].topics:
                turn += 1
            out[order[turn % len(order)]].setdefault(topic, []).append(partition)
            turn += 1
    return out


ASSIGNORS = {"range": assign_range, "roundrobin": assign_roundrobin}
