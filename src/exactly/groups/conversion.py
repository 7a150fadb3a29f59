"""The classic consumer protocol's bytes (ConsumerProtocolSubscription/Assignment, through kio)
and the conversions of a live group between a classic group and a KIP-848 consumer group, which
migration.py and consumer_coordinator.py apply."""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v0.data import TopicPartition as AssignedPartitions
from kio.schema.consumer_protocol_subscription.v0.data import (
    ConsumerProtocolSubscription as SubscriptionV0,
)
from kio.schema.consumer_protocol_subscription.v1.data import (
    ConsumerProtocolSubscription as SubscriptionV1,
)
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from exactly.groups.assignors import Assignment
from exactly.groups.consumer_group import (
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from exactly.groups.group import Group, Member

if TYPE_CHECKING:
    from exactly.log import LogManager

PROTOCOL_TYPE = "consumer"


# -- the classic consumer protocol's bytes --------------------------------------------------


def decode_subscription(metadata: bytes) -> tuple[tuple[str, ...], dict[str, list[int]]]:
    """The topics and owned partitions (v1+) of a ConsumerProtocolSubscription; ValueError if
    the bytes are not one. Later versions only add fields after these, which are skipped."""
    if len(metadata) < 2:
        raise ValueError("subscription metadata too short")
    version = int.from_bytes(metadata[:2], "big", signed=True)
    if version < 0:
        raise ValueError(f"bad subscription version {version}")
    try:
        if version == 0:
            sub0, _ = entity_reader(SubscriptionV0)(memoryview(metadata), 2)
            return tuple(sub0.topics), {}
        sub, _ = entity_reader(SubscriptionV1)(memoryview(metadata), 2)
    except Exception as exc:  # kio raises its own errors on short or bad bytes
        raise ValueError(f"undecodable subscription: {exc}") from exc
    return tuple(sub.topics), {tp.topic: list(tp.partitions) for tp in sub.owned_partitions}


def encode_assignment(assignment: Mapping[str, Iterable[int]]) -> bytes:
    """A ConsumerProtocolAssignment v0 (every client reads it) of partitions by topic name."""
    entity = ConsumerProtocolAssignment(assigned_partitions=tuple(
        AssignedPartitions(topic=TopicName(topic), partitions=tuple(i32(p) for p in sorted(parts)))
        for topic, parts in sorted(assignment.items())), user_data=None)
    out = io.BytesIO()
    out.write((0).to_bytes(2, "big"))
    entity_writer(ConsumerProtocolAssignment)(out, entity)
    return out.getvalue()


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    if len(data) < 2:
        return {}  # a member the leader gave nothing
    try:
        value, _ = entity_reader(ConsumerProtocolAssignment)(memoryview(data), 2)
    except Exception as exc:
        raise ValueError(f"undecodable assignment: {exc}") from exc
    return {tp.topic: list(tp.partitions) for tp in value.assigned_partitions}


def by_id(logs: LogManager, partitions: Mapping[str, Iterable[int]]) -> Assignment:
    """Partitions by topic name -> by topic id (topics that do not exist are left out)."""
    result: Assignment = {}
    for name, parts in partitions.items():
        info = logs.topic(name)
        if info is not None and (ps := frozenset(p for p in parts
                                                 if 0 <= p < info.num_partitions)):
            result[info.topic_id] = ps
    return result


def by_name(logs: LogManager, assignment: Assignment) -> dict[str, list[int]]:
    result: dict[str, list[int]] = {}
    for topic_id, parts in assignment.items():
        info = logs.topic_by_id(topic_id)
        if info is not None:
            result[info.name] = sorted(parts)
    return result


# -- the conversions --------------------------------------------------------------------------


def consumer_group_from_classic(group: Group, logs: LogManager, now_ms: int) -> ConsumerGroup:
    """The consumer group a Stable classic group becomes (Kafka's ConsumerGroup.fromClassicGroup);
    ValueError if a member's bytes are not the consumer protocol's."""
    epoch = group.generation_id
    cg = ConsumerGroup(group_epoch=epoch, assignment_epoch=epoch)
    protocol = group.protocol_name or ""
    for m in group.members.values():
        topics, _ = decode_subscription(m.metadata_for(protocol))
        assigned = by_id(logs, decode_assignment(m.assignment))
        member = ConsumerMember(
            m.member_id, m.group_instance_id, None, m.client_id, m.client_host, topics, None,
            m.rebalance_timeout_ms, None, member_epoch=epoch, previous_member_epoch=epoch,
            state=MemberState.STABLE, assigned=assigned,
            classic=ClassicMetadata(m.session_timeout_ms, tuple(m.protocols)),
            session_deadline=now_ms + m.session_timeout_ms)
        cg.put_member(member)
        cg.target[m.member_id] = dict(assigned)
    return cg


def classic_members(cg: ConsumerGroup, logs: LogManager, now_ms: int) -> list[Member]:
    """The classic members a consumer group with only classic members becomes (downgrade)."""
    members = []
    for m in cg.members.values():
        assert m.classic is not None
        members.append(Member(
            m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
            m.classic.session_timeout_ms, PROTOCOL_TYPE, list(m.classic.protocols),
            assignment=encode_assignment(by_name(logs, m.assigned)),
            heartbeat_deadline=now_ms + m.classic.session_timeout_ms))
    return members


