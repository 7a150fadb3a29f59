"""The "consumer" protocol of the classic group protocol: the subscription and assignment bytes
every Kafka consumer (Java, librdkafka, kafka-python) writes into JoinGroup and SyncGroup, and
the range and roundrobin assignors as Kafka's own, so a group can mix this client with others.

Subscription: version int16, topics [string], user_data bytes, then (v1+) owned partitions
[topic string, partitions [int32]], (v2+) generation id int32, (v3+) rack id nullable string.
Assignment: version int16, partitions [topic string, partitions [int32]], user_data bytes.
A reader takes the fields it knows and ignores the rest, as Kafka's own parser does.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

PROTOCOL_TYPE = "consumer"
STRATEGIES = ("range", "roundrobin")

_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


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


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError("consumer protocol bytes end early")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self._take(n).decode("utf-8")

    def bytes_(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self._take(n)

    def topic_partitions(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for _ in range(max(self.i32(), 0)):
            topic = self.string() or ""
            out[topic] = [self.i32() for _ in range(max(self.i32(), 0))]
        return out

    @property
    def at_end(self) -> bool:
        return self.pos >= len(self.data)


def _string(out: bytearray, text: str) -> None:
    raw = text.encode("utf-8")
    out += _I16.pack(len(raw)) + raw


def _bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(data)) + data


def _topic_partitions(out: bytearray, parts: Mapping[str, list[int]]) -> None:
    out += _I32.pack(len(parts))
    for topic in sorted(parts):
        _string(out, topic)
        out += _I32.pack(len(parts[topic]))
        for p in sorted(parts[topic]):
            out += _I32.pack(p)


def encode_subscription(sub: Subscription) -> bytes:
    """Version 1: topics, user data and the partitions owned before this rebalance."""
    out = bytearray(_I16.pack(1))
    out += _I32.pack(len(sub.topics))
    for topic in sorted(sub.topics):
        _string(out, topic)
    _bytes(out, sub.user_data)
    _topic_partitions(out, sub.owned_partitions)
    return bytes(out)


def decode_subscription(data: bytes) -> Subscription:
    r = _Reader(data)
    version = r.i16()
    if version < 0:
        raise ProtocolError(f"bad subscription version {version}")
    topics = [r.string() or "" for _ in range(max(r.i32(), 0))]
    user_data = r.bytes_() if not r.at_end else None
    owned = r.topic_partitions() if version >= 1 and not r.at_end else {}
    return Subscription(topics, user_data, owned)


def encode_assignment(assignment: Assignment) -> bytes:
    out = bytearray(_I16.pack(0))
    _topic_partitions(out, assignment.partitions)
    _bytes(out, assignment.user_data)
    return bytes(out)


def decode_assignment(data: bytes) -> Assignment:
    if not data:
        return Assignment({})  # a member the leader gave nothing
    r = _Reader(data)
    if r.i16() < 0:
        raise ProtocolError("bad assignment version")
    partitions = r.topic_partitions()
    user_data = r.bytes_() if not r.at_end else None
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
