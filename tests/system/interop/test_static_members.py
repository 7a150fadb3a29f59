"""Static membership (KIP-345), precise session deadlines and OffsetDelete over TCP with unchanged
confluent-kafka (librdkafka) clients (issue 17): a static member killed with kill -9 and
restarted within its session gets its partitions back without the other member seeing a
rebalance, and no record is processed twice; DeleteGroups right after a session deadline
succeeds; librdkafka's DeleteConsumerGroupOffsets (and kafka-python's); exactly-once consume-transform-produce with static
members under kill -9 of a worker."""

from __future__ import annotations

import datetime
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka import errors as kafka_errors
from kio.schema.join_group.v5.request import JoinGroupRequestProtocol
from kio.schema.sync_group.v3.request import SyncGroupRequestAssignment

from exactly.protocol.apis import ApiKey
from exactly.testing import EmbeddedBroker
from tests.helpers.interop import rdkafka_admin
from tests.paths import WORKERS
from tests.rawclient import RawConnection
from tests.support import create_topic, produce_confluent
from tests.system.test_eos_pipeline import Worker, _check_output, _wait_until_all_consumed

WORKER = WORKERS / "static_worker.py"
SETTINGS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(settings=SETTINGS) as b:
        yield b


class Member:
    """A static_worker.py process; each start writes its own output file."""

    def __init__(self, broker: EmbeddedBroker, args: list[str]) -> None:
        self.args = [sys.executable, str(WORKER), *args]
        self.dir = Path(broker.data_dir).parent
        self.proc: subprocess.Popen | None = None
        self.outputs: list[Path] = []

    def start(self) -> None:
        out = self.dir / f"static-member-{time.monotonic_ns()}.log"
        self.outputs.append(out)
        with open(out, "wb") as f:
            self.proc = subprocess.Popen(self.args, stdout=f, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def lines(self, start: int = -1) -> list[str]:
        """The output lines of one start (the last by default)."""
        return self.outputs[start].read_text().splitlines()

    def records(self) -> list[str]:
        return [line.split(" ", 1)[1] for out in self.outputs
                for line in out.read_text().splitlines() if line.startswith("record ")]

    def partitions(self, start: int = -1) -> set[int] | None:
        """What the last rebalance callback of a start left assigned (None before any)."""
        owned = None
        for line in self.lines(start):
            kind, _, parts = line.partition(" ")
            if kind == "assigned":
                owned = {int(p) for p in parts.split(",") if p}
            elif kind == "revoked":
                owned = set()
        return owned


def test_restarted_static_member_gets_its_partitions_back_without_a_rebalance(broker):
    topic, group = "static-in", "static-app"
    create_topic(broker.bootstrap, topic, partitions=4)
    b = Member(broker, ["consume", broker.bootstrap, group, "b", topic])
    b.start()
    events: list[tuple[str, list[int]]] = []
    a = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "group.instance.id": "a", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 10_000,
                  "heartbeat.interval.ms": 300, "partition.assignment.strategy": "range"})
    a.subscribe([topic],
                on_assign=lambda _c, ps: events.append(("assign", [p.partition for p in ps])),
                on_revoke=lambda _c, ps: events.append(("revoke", [p.partition for p in ps])))
    seen_by_a: list[str] = []

    def pump(done, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = a.poll(0.05)
            if msg is not None and msg.error() is None:
                a.commit(msg, asynchronous=False)
                seen_by_a.append(msg.value().decode())
            if done():
                return
        raise AssertionError(f"{what} did not happen; a: {events}, b: {b.lines()}")

    def a_owns() -> set[int]:
        return {tp.partition for tp in a.assignment()}

    try:
        def formed() -> bool:  # both members own partitions, together all of them
            owned = b.partitions() or set()
            return bool(owned) and bool(a_owns()) and owned | a_owns() == {0, 1, 2, 3} \
                and not owned & a_owns()

        pump(formed, "the group forming")
        b_owned = b.partitions()
        settled = len(events)
        values = [f"v{i}" for i in range(40)]
        produce_confluent(broker.bootstrap, topic, [v.encode() for v in values],
                          keys=[str(i).encode() for i in range(40)])
        pump(lambda: len(seen_by_a) + len(b.records()) == 40, "consuming the first records")

        b.kill()  # kill -9: a static member sends no LeaveGroup
        b.start()  # within its 10 s session
        pump(lambda: b.partitions() is not None, "b's restart")
        assert b.partitions() == b_owned
        more = [f"v{i}" for i in range(40, 80)]
        produce_confluent(broker.bootstrap, topic, [v.encode() for v in more],
                          keys=[str(i).encode() for i in range(40, 80)])
        pump(lambda: len(seen_by_a) + len(b.records()) >= 80, "consuming the later records")

        assert events[settled:] == [], "the other member saw a rebalance"
        assert [line for line in b.lines() if not line.startswith("record ")] == \
            [f"assigned {','.join(map(str, sorted(b_owned or ())))}"]
        processed = Counter(seen_by_a + b.records())
        assert sorted(processed) == sorted(values + more)
        assert set(processed.values()) == {1}, "a record was processed twice"
    finally:
        b.kill()
        a.close()


def _raw_static_member(conn: RawConnection, group: str, session_ms: int) -> tuple[str, int]:
    """JoinGroup + SyncGroup as a static member (no MEMBER_ID_REQUIRED): (member id, gen)."""
    timeout = datetime.timedelta(milliseconds=session_ms)
    joined = conn.request(ApiKey.JOIN_GROUP, 5, group_id=group, session_timeout=timeout,
                          rebalance_timeout=timeout, member_id="", group_instance_id="x",
                          protocol_type="consumer",
                          protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),))
    assert joined.error_code == 0, joined
    synced = conn.request(ApiKey.SYNC_GROUP, 3, group_id=group,
                          generation_id=joined.generation_id, member_id=joined.member_id,
                          group_instance_id="x", assignments=(SyncGroupRequestAssignment(
                              member_id=joined.member_id, assignment=b""),))
    assert synced.error_code == 0, synced
    return joined.member_id, joined.generation_id


def test_delete_groups_right_after_the_session_deadline_succeeds(broker):
    group, session_ms = "session-deadline", 1000
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.list_topics(timeout=10)  # connected before the deadline matters
    conn = RawConnection(broker.host, broker.port)
    try:
        member, gen = _raw_static_member(conn, group, session_ms)
        beat = conn.request(ApiKey.HEARTBEAT, 3, group_id=group, generation_id=gen,
                            member_id=member, group_instance_id="x")
        heard = time.monotonic()  # the broker's deadline is at most session_ms after this
        assert beat.error_code == 0
        with pytest.raises(KafkaException) as live:
            admin.delete_consumer_groups([group], request_timeout=10)[group].result()
        assert live.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
        time.sleep(max(0.0, heard + session_ms / 1000 + 0.005 - time.monotonic()))
        assert admin.delete_consumer_groups([group], request_timeout=10)[group].result() is None
    finally:
        conn.close()


def test_delete_consumer_group_offsets(broker):
    group = "offsets-deleted"
    create_topic(broker.bootstrap, "od-in", partitions=1)
    create_topic(broker.bootstrap, "od-old", partitions=2)
    produce_confluent(broker.bootstrap, "od-in", [b"x"] * 3)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "group.instance.id": "od-1", "session.timeout.ms": 6000})
    try:
        consumer.subscribe(["od-in"])
        for _ in range(3):
            while (msg := consumer.poll(10)) is None or msg.error() is not None:
                pass
        consumer.commit(offsets=[TopicPartition("od-in", 0, 3), TopicPartition("od-old", 0, 5),
                                 TopicPartition("od-old", 1, 6)], asynchronous=False)

        # librdkafka's DeleteConsumerGroupOffsets (through ctypes: confluent-kafka's binding
        # does not expose it), then kafka-python's admin.
        assert rdkafka_admin.delete_consumer_group_offsets(
            broker.bootstrap, group, [("od-old", 0)]) == (0, {("od-old", 0): 0})
        # The live group consumes od-in: its offset stays (GROUP_SUBSCRIBED_TO_TOPIC).
        assert rdkafka_admin.delete_consumer_group_offsets(
            broker.bootstrap, group, [("od-in", 0)]) == \
            (0, {("od-in", 0): KafkaError.GROUP_SUBSCRIBED_TO_TOPIC})
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            kept = admin.delete_group_offsets(group, [KafkaTopicPartition("od-in", 0)])
            assert kept == {KafkaTopicPartition("od-in", 0):
                            kafka_errors.GroupSubscribedToTopicError}
            with pytest.raises(kafka_errors.GroupIdNotFoundError):
                admin.delete_group_offsets("no-such-group", [KafkaTopicPartition("od-in", 0)])
        finally:
            admin.close()
        committed = consumer.committed([TopicPartition("od-in", 0), TopicPartition("od-old", 0),
                                        TopicPartition("od-old", 1)], timeout=10)
        assert [tp.offset for tp in committed] == [3, -1001, 6]
    finally:
        consumer.close()
    broker.restart(kill=True)  # the tombstone is durable
    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committed = check.committed([TopicPartition("od-old", 0), TopicPartition("od-old", 1)],
                                    timeout=10)
        assert [tp.offset for tp in committed] == [-1001, 6]
    finally:
        check.close()


def test_static_members_consume_transform_produce_exactly_once_under_kill_9(broker):
    for topic in ("sctp-in", "sctp-out"):
        create_topic(broker.bootstrap, topic, partitions=3)
    values = [f"static-{i}" for i in range(1200)]
    placed = Counter(p for p, _ in produce_confluent(
        broker.bootstrap, "sctp-in", [v.encode() for v in values],
        keys=[str(i).encode() for i in range(len(values))]))
    ends = [placed[q] for q in range(3)]  # a fresh topic: offsets from 0
    workers = []
    for i in range(2):  # the group is "ctp", as the helpers read it
        w = Worker(broker, f"sctp-{i}", "sctp-in", "sctp-out", batch=20)
        w.args = [sys.executable, str(WORKER), "ctp", broker.bootstrap, "ctp", f"sctp-member-{i}",
                  f"sctp-{i}", "sctp-in", "sctp-out", "20"]
        workers.append(w)
    try:
        for w in workers:
            w.ensure_running()
        for pause in (2.0, 1.5, 2.5):
            time.sleep(pause)
            workers[0].kill()
            workers[0].ensure_running()  # back within its session: no rebalance
        _wait_until_all_consumed(broker, workers, "sctp-in", 3, ends, timeout=90)
    finally:
        for w in workers:
            w.kill()
    assert workers[0].starts == 4
    # The restarts took the static path: a new member id in place of the old, no rebalance.
    assert "static member sctp-member-0 of group ctp rejoined as" in broker.log_text()
    _check_output(broker, values, "sctp-out", 3)
