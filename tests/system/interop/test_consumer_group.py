"""A group of three confluent-kafka consumers over six partitions rebalances as members join and
leave, and the offsets it committed survive a kill -9 of the broker."""

import time

from confluent_kafka import Consumer, TopicPartition

from exactly.testing import EmbeddedBroker
from tests.support import create_topic, produce_confluent

TOPIC = "orders"
GROUP = "billing"


def _consumer(bootstrap: str, name: str) -> Consumer:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": name,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
        "partition.assignment.strategy": "range",
    })
    consumer.subscribe([TOPIC])
    return consumer


def _poll_until(consumers, predicate, seen, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None:
                seen.setdefault(c, []).append(msg)
        if predicate():
            return
    raise AssertionError("group did not reach the expected state: " +
                         str([sorted(tp.partition for tp in c.assignment()) for c in consumers]))


def _balanced(consumers, per_member):
    def check():
        owned = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
        flat = sorted(p for parts in owned for p in parts)
        return flat == list(range(6)) and all(len(parts) == per_member for parts in owned)
    return check


def test_rebalance_on_join_and_leave_and_offsets_survive_restart():
    with EmbeddedBroker(settings={"group.initial.rebalance.delay.ms": "0"}) as broker:
        create_topic(broker.bootstrap, TOPIC, partitions=6)
        values = [f"order-{i}".encode() for i in range(600)]
        placed = produce_confluent(broker.bootstrap, TOPIC, values,
                                   keys=[str(i).encode() for i in range(600)])
        end = {p: 1 + max((o for q, o in placed if q == p), default=-1) for p in range(6)}

        seen: dict = {}
        first = _consumer(broker.bootstrap, "c1")
        _poll_until([first], _balanced([first], 6), seen)

        second, third = _consumer(broker.bootstrap, "c2"), _consumer(broker.bootstrap, "c3")
        members = [first, second, third]
        _poll_until(members, _balanced(members, 2), seen)

        third.close()  # leaves the group: the other two take over its partitions
        members = [first, second]
        _poll_until(members, _balanced(members, 3), seen)

        # Read everything, then commit the positions synchronously.
        def all_read():
            return all(tp.offset == end[tp.partition] for c in members for tp in c.position(c.assignment()))
        _poll_until(members, all_read, seen)
        committed_before = {}
        for c in members:
            c.commit(asynchronous=False)
            for tp in c.committed(c.assignment(), timeout=10):
                committed_before[tp.partition] = tp.offset
        assert committed_before == end
        for c in members:
            c.close()

        broker.restart(kill=True)

        produce_confluent(broker.bootstrap, TOPIC, [b"after-restart"], keys=[b"x"])
        late = _consumer(broker.bootstrap, "c4")
        committed = late.committed([TopicPartition(TOPIC, p) for p in range(6)], timeout=20)
        assert {tp.partition: tp.offset for tp in committed} == committed_before
        got = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            msg = late.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        late.close()
        assert got == [b"after-restart"]  # resumed at the committed offsets, nothing re-read
