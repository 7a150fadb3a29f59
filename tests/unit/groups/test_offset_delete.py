"""OffsetDelete (KIP-496) with explicit time: Kafka's rules for Empty groups, live classic
consumer-protocol groups (GROUP_SUBSCRIBED_TO_TOPIC), other live classic groups
(NON_EMPTY_GROUP), KIP-848 consumer groups, and the tombstones surviving a restart."""

from __future__ import annotations

import struct

from exactly.groups import GroupCoordinator, OffsetToCommit
from exactly.groups.consumer_coordinator import ConsumerHeartbeat
from exactly.protocol.errors import ErrorCode
from tests.helpers.groups.group_helpers import T0, new_member, sync

G = "offsets-app"


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: the topics, no user data."""
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)


def commit(coord: GroupCoordinator, offsets: dict[tuple[str, int], int], now: int = T0,
           **member: object) -> None:
    result = coord.commit_offsets(
        group_id=G, member_id=str(member.get("member_id", "")), group_instance_id=None,
        generation_id=int(member.get("generation_id", -1)),  # type: ignore[call-overload]
        offsets={tp: OffsetToCommit(o) for tp, o in offsets.items()}, now_ms=now)
    assert set(result.errors.values()) == {ErrorCode.none}, result.errors


def test_empty_group_offsets_are_deleted_and_stay_deleted(env) -> None:
    env.logs.create_topic("t", 2, internal=False)
    coord = env.coordinator
    commit(coord, {("t", 0): 5, ("t", 1): 7})
    top, result = coord.delete_offsets(G, [("t", 0), ("t", 9)], T0 + 1)
    assert top is ErrorCode.none and result.log is not None
    # A partition without a committed offset is not an error (Kafka writes nothing for it).
    assert result.errors == {("t", 0): ErrorCode.none, ("t", 9): ErrorCode.none}
    assert coord.fetch_offsets(G, None) == {("t", 1): coord.fetch_offsets(G, [("t", 1)])[("t", 1)]}
    coord = env.restart(T0 + 2)
    assert set(coord.fetch_offsets(G, None)) == {("t", 1)}


def test_unknown_group_is_group_id_not_found(env) -> None:
    top, result = env.coordinator.delete_offsets("nobody", [("t", 0)], T0)
    assert top is ErrorCode.group_id_not_found and result.errors == {}


def test_live_consumer_group_keeps_offsets_of_topics_it_consumes(env) -> None:
    env.logs.create_topic("in", 1, internal=False)
    env.logs.create_topic("old", 1, internal=False)
    coord = env.coordinator
    member, out = new_member(coord, G, now=T0, protocols=[("range", subscription("in"))])
    gen = out[0].generation_id
    assert sync(coord, G, member, gen, now=T0, assignments={member: b""})[0].error \
        is ErrorCode.none
    commit(coord, {("in", 0): 3, ("old", 0): 4}, member_id=member, generation_id=gen)
    top, result = coord.delete_offsets(G, [("in", 0), ("old", 0)], T0 + 1)
    assert top is ErrorCode.none
    assert result.errors == {("in", 0): ErrorCode.group_subscribed_to_topic,
                             ("old", 0): ErrorCode.none}
    assert set(coord.fetch_offsets(G, None)) == {("in", 0)}


def test_live_group_of_another_protocol_type_is_not_empty(env) -> None:
    env.logs.create_topic("t", 1, internal=False)
    coord = env.coordinator
    new_member(coord, G, now=T0, protocol_type="connect")
    top, result = coord.delete_offsets(G, [("t", 0)], T0 + 1)
    assert top is ErrorCode.non_empty_group and result.log is None


def test_consumer_protocol_group_by_subscribed_names(env) -> None:
    env.logs.create_topic("in", 1, internal=False)
    env.logs.create_topic("old", 1, internal=False)
    coord = env.coordinator
    commit(coord, {("in", 0): 3, ("old", 0): 4})
    joined = coord.consumer_heartbeat(ConsumerHeartbeat(
        group_id=G, member_id="m1", member_epoch=0, rebalance_timeout_ms=5000,
        subscribed_topic_names=("in",)), T0 + 1)
    assert joined.error is ErrorCode.none
    top, result = coord.delete_offsets(G, [("in", 0), ("old", 0)], T0 + 2)
    assert top is ErrorCode.none
    assert result.errors == {("in", 0): ErrorCode.group_subscribed_to_topic,
                             ("old", 0): ErrorCode.none}
    assert set(coord.fetch_offsets(G, None)) == {("in", 0)}
