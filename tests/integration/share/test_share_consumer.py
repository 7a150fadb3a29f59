"""confluent-kafka's ShareConsumer against the broker over TCP (KIP-932): members sharing one
partition, acknowledgements, releases, lock expiries, the delivery-count limit, a consumer and
the broker killed with kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType

from exactly.testing import EmbeddedBroker
from tests.helpers.share.helpers import (
    LOCK_MS,
    SETTINGS,
    close_all,
    create_topic,
    poll_until,
    produce,
    set_group_configs,
    share_consumer,
)
from tests.helpers.share.raw import describe_share_group, start_offset

pytestmark = pytest.mark.broker_settings(SETTINGS)


def test_members_share_one_partition_and_get_every_record_once(broker: EmbeddedBroker) -> None:
    create_topic(broker, "q")
    set_group_configs(broker, "sg", share_auto_offset_reset="earliest")
    for first in range(0, 300, 10):  # batches of 10: a member acquires whole batches
        produce(broker, "q", (b"%d" % i for i in range(first, first + 10)))
    consumers = [share_consumer(broker, "sg", "q", max_poll_records=20) for _ in range(3)]
    delivered: Counter[int] = Counter()
    by_member: Counter[int] = Counter()

    def got(i: int, m: Any) -> None:
        delivered[m.offset()] += 1
        by_member[i] += 1
        assert m.value() == b"%d" % m.offset()
    try:
        poll_until(consumers, lambda: len(delivered) == 300, on_message=got)
        for c in consumers:  # the last poll's records, accepted (implicit mode)
            c.commit_sync(10)
        described = describe_share_group(broker, "sg")
    finally:
        close_all(consumers)
    assert set(delivered) == set(range(300)) and set(delivered.values()) == {1}
    assert len(by_member) == 3, by_member  # all three took part
    # every member is assigned the one partition: they share it
    assert len(described.members) == 3
    assert all(tuple(tp.partitions) == (0,) for m in described.members
               for tp in m.assignment.topic_partitions)
    assert start_offset(broker, "sg", "q", 0) == 300  # every record acknowledged


def test_released_and_timed_out_records_are_redelivered(broker: EmbeddedBroker) -> None:
    create_topic(broker, "q")
    set_group_configs(broker, "sg", share_auto_offset_reset="earliest")
    produce(broker, "q", [b"a", b"b", b"c"])
    a = share_consumer(broker, "sg", "q", share_acknowledgement_mode="explicit")
    seen: list[tuple[int, int]] = []
    try:
        poll_until([a], lambda: len(seen) >= 3,
                   on_message=lambda _, m: seen.append((m.offset(), m.delivery_count())))
        assert seen == [(0, 1), (1, 1), (2, 1)]
        # explicit acknowledgements: accept 0, release 1, leave 2 unacknowledged
        a.acknowledge_offset("q", 0, 0, AcknowledgeType.ACCEPT)
        a.acknowledge_offset("q", 0, 1, AcknowledgeType.RELEASE)
        a.acknowledge_offset("q", 0, 2, AcknowledgeType.RELEASE)
        a.commit_sync(10)
        again: list[tuple[int, int]] = []

        def record(_: int, m: Any) -> None:
            again.append((m.offset(), m.delivery_count()))
            a.acknowledge(m, AcknowledgeType.ACCEPT if m.offset() == 2 else
                          AcknowledgeType.RELEASE if m.delivery_count() == 2 else
                          AcknowledgeType.ACCEPT)
        poll_until([a], lambda: len(again) >= 2, on_message=record)
        assert sorted(again) == [(1, 2), (2, 2)]  # released: delivered again, count + 1
        a.commit_sync(10)
    finally:
        a.close()
    # 1 was released once more; a member that stops polling holds it until its lock expires
    b = share_consumer(broker, "sg", "q", share_acknowledgement_mode="explicit")
    c = share_consumer(broker, "sg", "q", share_acknowledgement_mode="explicit")
    held: list[tuple[int, int]] = []
    try:
        poll_until([b], lambda: bool(held),
                   on_message=lambda _, m: held.append((m.offset(), m.delivery_count())))
        assert held == [(1, 3)]
        started = time.monotonic()
        late: list[tuple[int, int]] = []

        def take(_: int, m: Any) -> None:
            late.append((m.offset(), m.delivery_count()))
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        poll_until([c], lambda: bool(late), on_message=take)  # b never polls again
        assert late == [(1, 4)]
        assert time.monotonic() - started >= (LOCK_MS - 500) / 1000  # only after the lock
        c.commit_sync(10)
    finally:
        close_all([b, c])
    assert start_offset(broker, "sg", "q", 0) == 3


def test_delivery_count_limit_archives_a_record(broker: EmbeddedBroker) -> None:
    create_topic(broker, "q")
    set_group_configs(broker, "sg", share_auto_offset_reset="earliest",
                      share_delivery_count_limit="2")
    produce(broker, "q", [b"poison", b"good"])
    a = share_consumer(broker, "sg", "q", share_acknowledgement_mode="explicit")
    deliveries: list[tuple[int, int]] = []

    def handle(_: int, m: Any) -> None:
        deliveries.append((m.offset(), m.delivery_count()))
        a.acknowledge(m, AcknowledgeType.RELEASE if m.offset() == 0 else AcknowledgeType.ACCEPT)
    try:
        poll_until([a], lambda: (0, 2) in deliveries and (1, 1) in deliveries, on_message=handle)
        a.commit_sync(10)
        # the second release reached the limit (2): archived, never delivered again
        produce(broker, "q", [b"later"])
        poll_until([a], lambda: (2, 1) in deliveries, on_message=handle)
        a.commit_sync(10)
    finally:
        a.close()
    assert [d for d in deliveries if d[0] == 0] == [(0, 1), (0, 2)]
    assert start_offset(broker, "sg", "q", 0) == 3


_HOLDER = textwrap.dedent("""\
    import sys, time
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([sys.argv[3]])
    while True:
        got = [m.offset() for m in c.poll(0.5) if m.error() is None]
        if got:
            print(" ".join(map(str, got)), flush=True)
            time.sleep(3600)  # holds its records: never acknowledges, never polls again
    """)


def test_records_of_a_consumer_killed_with_kill_9_are_redelivered(
        broker: EmbeddedBroker) -> None:
    create_topic(broker, "q")
    set_group_configs(broker, "sg", share_auto_offset_reset="earliest")
    produce(broker, "q", [b"x", b"y"])
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, broker.bootstrap, "sg", "q"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert sorted(map(int, line.split())) == [0, 1], line
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
    c = share_consumer(broker, "sg", "q")
    got: list[tuple[int, int]] = []
    try:
        poll_until([c], lambda: len(got) >= 2,
                   on_message=lambda _, m: got.append((m.offset(), m.delivery_count())))
        c.commit_sync(10)
    finally:
        c.close()
    assert sorted(got) == [(0, 2), (1, 2)]


def test_broker_killed_mid_run_keeps_the_share_group_state(broker: EmbeddedBroker) -> None:
    create_topic(broker, "q")
    set_group_configs(broker, "sg", share_auto_offset_reset="earliest")
    produce(broker, "q", (b"%d" % i for i in range(40)))
    a = share_consumer(broker, "sg", "q", share_acknowledgement_mode="explicit",
                       max_poll_records=10)
    first: dict[int, int] = {}

    def handle(_: int, m: Any) -> None:
        o = m.offset()
        first[o] = m.delivery_count()
        a.acknowledge(m, AcknowledgeType.REJECT if o == 10 else
                      AcknowledgeType.RELEASE if o == 11 else AcknowledgeType.ACCEPT)
    try:
        poll_until([a], lambda: len(first) >= 20, on_message=handle)
        a.commit_sync(10)
    finally:
        a.close()
    # a second member acquires records and holds them when the broker dies
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, broker.bootstrap, "sg", "q"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        held = set(map(int, holder.stdout.readline().split()))
        assert held
    finally:
        broker.kill()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
    broker.start()
    acked = set(first) - {10, 11}
    b = share_consumer(broker, "sg", "q")
    after: dict[int, int] = {}
    try:
        poll_until([b], lambda: len(after) >= 40 - len(acked) - 1,
                   on_message=lambda _, m: after.__setitem__(m.offset(), m.delivery_count()))
        b.commit_sync(10)
    finally:
        b.close()
    assert not acked & set(after), "an acknowledged record was delivered again"
    assert 10 not in after  # rejected before the crash: archived
    assert set(after) == set(range(40)) - acked - {10}
    assert after[11] == 2  # released before the crash: its delivery count was written
    # acquired only: as in Kafka no acquisition is written, so they count from 1 again
    assert all(after[o] == 1 for o in held - {11})
    assert start_offset(broker, "sg", "q", 0) == 40


def test_read_committed_share_group_gets_committed_records_only(broker: EmbeddedBroker) -> None:
    from confluent_kafka import Producer
    create_topic(broker, "q")
    set_group_configs(broker, "sg", share_auto_offset_reset="earliest",
                      share_isolation_level="read_committed")
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "t1"})
    p.init_transactions(10)
    p.begin_transaction()
    for v in (b"aborted-1", b"aborted-2"):
        p.produce("q", value=v, partition=0)
    p.flush(10)  # in the log before the abort
    p.abort_transaction(10)
    p.begin_transaction()
    p.produce("q", value=b"committed", partition=0)
    p.commit_transaction(10)
    p.begin_transaction()
    p.produce("q", value=b"open", partition=0)
    p.flush(10)
    c = share_consumer(broker, "sg", "q")
    values: list[tuple[int, bytes]] = []

    def got(_: int, m: Any) -> None:
        values.append((m.offset(), m.value()))
    try:
        poll_until([c], lambda: bool(values), on_message=got)
        assert values == [(3, b"committed")]  # 0-1 aborted, 2 their marker
        p.commit_transaction(10)  # the open one commits: now it is delivered
        poll_until([c], lambda: len(values) == 2, on_message=got)
        c.commit_sync(10)
    finally:
        c.close()
    assert values == [(3, b"committed"), (5, b"open")]
    # the markers (4, 6) and the aborted records count as done: the SPSO is at the end
    assert start_offset(broker, "sg", "q", 0) == 7
