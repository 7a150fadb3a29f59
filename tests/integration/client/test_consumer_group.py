"""Consumer groups: the consumer protocol's bytes and Kafka's assignors; groups of this client's
consumers and mixed groups with confluent-kafka sharing partitions and rebalancing; auto-commit;
the same against librdkafka's mock cluster for wire compatibility."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer

from exactly.client.assignors import (
    Assignment,
    Subscription,
    assign_range,
    assign_roundrobin,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from exactly.client.consumer import Consumer, ConsumerRecord, TopicPartition
from tests.support import create_topic

# -- protocol bytes and assignors (no broker) ----------------------------------------------


def test_subscription_and_assignment_round_trip():
    sub = Subscription(["b", "a"], b"ud", {"a": [1, 0]})
    back = decode_subscription(encode_subscription(sub))
    assert (back.topics, back.user_data, back.owned_partitions) == (["a", "b"], b"ud", {"a": [0, 1]})
    assignment = Assignment({"t": [3, 1], "u": [0]})
    assert decode_assignment(encode_assignment(assignment)).partitions == {"t": [1, 3], "u": [0]}
    assert decode_assignment(b"").partitions == {}


def test_reads_a_version_3_subscription_as_librdkafka_and_java_write_it():
    import struct
    raw = (struct.pack(">h", 3) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
           + struct.pack(">i", -1)  # no user data
           + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">ii", 1, 2)  # owned
           + struct.pack(">i", 7)  # generation
           + struct.pack(">h", 4) + b"rack")
    sub = decode_subscription(raw)
    assert (sub.topics, sub.user_data, sub.owned_partitions) == (["t"], None, {"t": [2]})


def _subs(**topics: list[str]) -> dict[str, Subscription]:
    return {member: Subscription(list(ts)) for member, ts in topics.items()}


def test_range_assignor_as_kafka():
    # Kafka's RangeAssignor: per topic, members sorted, the first ones get one extra partition.
    members = _subs(c0=["t0", "t1"], c1=["t0", "t1"])
    assert assign_range(members, {"t0": 3, "t1": 3}) == {
        "c0": {"t0": [0, 1], "t1": [0, 1]}, "c1": {"t0": [2], "t1": [2]}}
    members = _subs(c0=["t0"], c1=["t0", "t1"], c2=["t1"])
    assert assign_range(members, {"t0": 3, "t1": 2}) == {
        "c0": {"t0": [0, 1]}, "c1": {"t0": [2], "t1": [0]}, "c2": {"t1": [1]}}


def test_roundrobin_assignor_as_kafka():
    members = _subs(c0=["t0", "t1"], c1=["t0", "t1"])
    assert assign_roundrobin(members, {"t0": 3, "t1": 3}) == {
        "c0": {"t0": [0, 2], "t1": [1]}, "c1": {"t0": [1], "t1": [0, 2]}}
    # Kafka's javadoc example: C0 [t0], C1 [t0, t1], C2 [t0, t1, t2]; t0 1, t1 2, t2 3 partitions
    members = _subs(c0=["t0"], c1=["t0", "t1"], c2=["t0", "t1", "t2"])
    assert assign_roundrobin(members, {"t0": 1, "t1": 2, "t2": 3}) == {
        "c0": {"t0": [0]}, "c1": {"t1": [0]}, "c2": {"t1": [1], "t2": [0, 1, 2]}}


def test_static_members_are_ordered_by_instance_id():
    members = {"z-member": Subscription(["t"], group_instance_id="a"),
               "a-member": Subscription(["t"], group_instance_id="b")}
    assert assign_range(members, {"t": 2}) == {"z-member": {"t": [0]}, "a-member": {"t": [1]}}


# -- groups over TCP -------------------------------------------------------------------------


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce(bootstrap: str, topic: str, count: int, partitions: int, prefix: str = "v") -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, f"{prefix}{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def _consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "heartbeat.interval.ms": 200, "session.timeout.ms": 6000, **extra})


def _poll_until(consumers: list[Consumer], done: Callable[[], bool], sink: list[ConsumerRecord],
                timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        for c in consumers:
            sink += c.poll(timeout_ms=100)


def _split(consumers: list[Consumer], partitions: int) -> Callable[[], bool]:
    def done() -> bool:
        parts = [c.assignment() for c in consumers]
        union = set().union(*parts)
        return (all(parts) and sum(len(p) for p in parts) == partitions
                and len(union) == partitions)
    return done


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_members_share_partitions_and_rebalance_when_one_leaves(exactly_broker, strategy):
    bootstrap = exactly_broker.bootstrap
    topic, group = _name("shared"), _name("g")
    create_topic(bootstrap, topic, partitions=6)
    _produce(bootstrap, topic, 600, 6)
    # Auto-commit commits on revocation, so a rebalance hands partitions over without repeats.
    members = [_consumer(bootstrap, group, **{"partition.assignment.strategy": strategy,
                                              "enable.auto.commit": True})
               for _ in range(3)]
    for m in members:
        m.subscribe([topic])
    seen: list[ConsumerRecord] = []
    _poll_until(members, lambda: _split(members, 6)() and len(seen) >= 600, seen)
    assert sorted(len(m.assignment()) for m in members) == [2, 2, 2]
    assert len({(r.partition, r.offset) for r in seen}) == 600
    for m in members:
        m.commit()
    members[0].close()  # leaves the group: the others take its partitions over
    rest = members[1:]
    _produce(bootstrap, topic, 60, 6, prefix="after")
    later: list[ConsumerRecord] = []
    _poll_until(rest, lambda: _split(rest, 6)() and len(later) >= 60, later)
    assert sorted(r.value for r in later) == sorted(f"after{i}".encode() for i in range(60))
    assert {c.group_metadata().generation_id for c in rest} == {rest[0].group_metadata().generation_id}
    for m in rest:
        m.close()


def test_mixed_group_with_confluent_kafka(exactly_broker):
    bootstrap = exactly_broker.bootstrap
    topic, group = _name("mixed"), _name("g")
    create_topic(bootstrap, topic, partitions=4)
    _produce(bootstrap, topic, 400, 4)
    ours = _consumer(bootstrap, group)
    ours.subscribe([topic])
    theirs = ConfluentConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                "partition.assignment.strategy": "range"})
    theirs.subscribe([topic])
    seen_ours: list[ConsumerRecord] = []
    seen_theirs: list[tuple[int, int]] = []
    deadline = time.monotonic() + 60

    def places() -> set[tuple[int, int]]:
        return {(r.partition, r.offset) for r in seen_ours} | set(seen_theirs)

    # Nothing is committed, so a partition that changes hands during the first rebalance is read
    # again from its start: wait for every record, not for 400 reads.
    while len(places()) < 400 or len(ours.assignment()) != 2:
        assert time.monotonic() < deadline, (len(places()), len(seen_theirs), ours.assignment())
        seen_ours += ours.poll(timeout_ms=100)
        msg = theirs.poll(0.1)
        if msg is not None and msg.error() is None:
            seen_theirs.append((msg.partition(), msg.offset()))
    mine = {tp.partition for tp in ours.assignment()}
    their_parts = {tp.partition for tp in theirs.assignment()}
    assert mine | their_parts == {0, 1, 2, 3} and not mine & their_parts
    assert places() == {(p, o) for p in range(4) for o in range(100)}
    theirs.close()  # confluent leaves: ours gets everything
    _poll_until([ours], lambda: len(ours.assignment()) == 4, [])
    ours.close()


def test_auto_commit_on_close_and_resume(exactly_broker):
    bootstrap = exactly_broker.bootstrap
    topic, group = _name("auto"), _name("g")
    create_topic(bootstrap, topic, partitions=2)
    _produce(bootstrap, topic, 100, 2)
    first = _consumer(bootstrap, group, **{"enable.auto.commit": True,
                                          "auto.commit.interval.ms": 100})
    first.subscribe([topic])
    seen: list[ConsumerRecord] = []
    _poll_until([first], lambda: len(seen) >= 100, seen)
    first.close()
    _produce(bootstrap, topic, 10, 2, prefix="new")
    second = _consumer(bootstrap, group)
    second.subscribe(topic)
    more: list[ConsumerRecord] = []
    _poll_until([second], lambda: len(more) >= 10, more)
    assert sorted(r.value for r in more) == sorted(f"new{i}".encode() for i in range(10))
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    assert second.committed(tps) == {tp: 50 for tp in tps}
    second.unsubscribe()
    assert second.assignment() == set()
    second.close()


def test_group_on_the_mock_cluster(mock_bootstrap):
    """Wire compatibility of JoinGroup, SyncGroup, Heartbeat, OffsetCommit, OffsetFetch and
    LeaveGroup. One member at a time: when a second member joins, the mock answers its SyncGroup
    with INVALID_REQUEST and a null assignment (which kio cannot decode), so rebalancing between
    members is shown against Exactly's broker only."""
    topic, group = _name("mockgroup"), _name("g")
    _produce(mock_bootstrap, topic, 40, 4)
    a = _consumer(mock_bootstrap, group, **{"heartbeat.interval.ms": 100})
    a.subscribe([topic])
    seen: list[ConsumerRecord] = []
    _poll_until([a], lambda: len(seen) >= 40, seen)
    assert len(a.assignment()) == 4
    assert len({(r.partition, r.offset) for r in seen}) == 40
    time.sleep(0.5)  # a few heartbeats
    assert a.poll(timeout_ms=100) == []
    a.commit()
    meta = a.group_metadata()
    assert meta.generation_id >= 1 and meta.member_id
    a.close()  # LeaveGroup
    _produce(mock_bootstrap, topic, 8, 4, prefix="late")
    b = _consumer(mock_bootstrap, group)
    b.subscribe([topic])
    late: list[ConsumerRecord] = []
    _poll_until([b], lambda: len(late) >= 8, late)
    assert sorted(r.value for r in late) == sorted(f"late{i}".encode() for i in range(8))
    b.close()
