"""KIP-848 over TCP with unchanged confluent-kafka (`group.protocol=consumer`): consumers joining,
leaving and killed with SIGKILL in a group of 6 partitions; exactly-once consume-transform-produce
through kill -9 of the workers; a group moved classic -> consumer -> classic with its offsets; and
the broker killed under a live consumer group."""

from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from exactly.protocol.apis import ApiKey
from exactly.testing import EmbeddedBroker
from tests.helpers.groups.consumer_protocol_worker import consumer_config
from tests.paths import REPO
from tests.rawclient import RawConnection
from tests.support import create_topic, end_offsets, produce_confluent
from tests.system.test_eos_pipeline import _check_output

_REBALANCE_RACES = {KafkaError.ILLEGAL_GENERATION, KafkaError.STALE_MEMBER_EPOCH,
                    KafkaError.REBALANCE_IN_PROGRESS, KafkaError.UNKNOWN_MEMBER_ID,
                    KafkaError._NO_OFFSET}
# Short consumer-group timers, so that a killed member is fenced within seconds.
SETTINGS = {
    "group.consumer.session.timeout.ms": "2000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "200",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


def _worker(broker: EmbeddedBroker, *args: str) -> subprocess.Popen:
    log = open(Path(broker.data_dir).parent / "consumer-protocol-workers.log", "ab")  # noqa: SIM115
    return subprocess.Popen([sys.executable, "-m", "tests.helpers.groups.consumer_protocol_worker",
                             *args],
                            cwd=REPO, stdout=log, stderr=log,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _describe(broker: EmbeddedBroker, group: str):
    conn = RawConnection(broker.host, broker.port)
    try:
        resp = conn.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, group_ids=(group,),
                            include_authorized_operations=False)
    finally:
        conn.close()
    (described,) = resp.groups
    return described


def _owners(described) -> dict[int, list[str]]:
    """Partition -> the members that hold it, as the broker sees the group."""
    owners: dict[int, list[str]] = {}
    for m in described.members:
        for tp in m.assignment.topic_partitions:
            for p in tp.partitions:
                owners.setdefault(p, []).append(m.member_id)
    return owners


def _poll_until(consumers: list[Consumer], done: Callable[[], bool], seen: list[str],
                what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            msgs = [m for m in c.consume(50, 0.05) if m.error() is None]
            if msgs:
                seen.extend(m.value().decode() for m in msgs)
                _commit(c)
        if done():
            return
    raise AssertionError(f"timed out waiting for {what}: " + str(
        [sorted(tp.partition for tp in c.assignment()) for c in consumers]))


def _commit(consumer: Consumer) -> None:
    """Commit the positions; a commit that races a rebalance is refused (the member's epoch or
    generation moved on, as in Kafka) and the next one commits them."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() not in _REBALANCE_RACES:
            raise


def _balanced(consumers: list[Consumer], sizes: list[int]) -> Callable[[], bool]:
    def check() -> bool:
        owned = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
        flat = sorted(p for parts in owned for p in parts)
        return flat == list(range(6)) and sorted(len(o) for o in owned) == sorted(sizes)
    return check


def test_members_join_leave_and_are_killed_and_no_record_is_lost(tmp_path):
    with EmbeddedBroker(settings=SETTINGS) as broker:
        create_topic(broker.bootstrap, "kip848", partitions=6)
        sent: list[str] = []

        def produce(n: int) -> None:
            values = [f"v{len(sent) + i}" for i in range(n)]
            produce_confluent(broker.bootstrap, "kip848", [v.encode() for v in values],
                              keys=[v.encode() for v in values])
            sent.extend(values)

        produce(300)
        seen: list[str] = []
        out = tmp_path / "worker.out"

        def lost() -> set[str]:
            by_worker = out.read_text().split() if out.exists() else []
            return set(sent) - set(seen) - set(by_worker)

        worker = _worker(broker, "consume", broker.bootstrap, "g848", "kip848", str(out))
        c1 = Consumer(consumer_config(broker.bootstrap, "g848", **{"client.id": "c1"}))
        c1.subscribe(["kip848"])
        c2 = None
        try:
            _poll_until([c1], lambda: len(c1.assignment()) == 3, seen, "c1 and the worker 3 each")
            produce(300)
            c2 = Consumer(consumer_config(broker.bootstrap, "g848", **{"client.id": "c2"}))
            c2.subscribe(["kip848"])
            _poll_until([c1, c2], lambda: len(c1.assignment()) == len(c2.assignment()) == 2, seen,
                        "c1, c2 and the worker 2 each")
            _kill(worker)  # kill -9: its partitions go once its session expires
            produce(300)
            _poll_until([c1, c2], _balanced([c1, c2], [3, 3]), seen, "c1 and c2 3 each")
            c2.close()  # leaves the group: epoch -1
            c2 = None
            produce(300)
            _poll_until([c1], _balanced([c1], [6]), seen, "c1 alone with all 6")
            owners = _owners(_describe(broker, "g848"))
            assert sorted(owners) == list(range(6))
            assert all(len(holders) == 1 for holders in owners.values())
            _poll_until([c1], lambda: not lost(), seen, "every record")
        finally:
            _kill(worker)
            c1.close()
            if c2 is not None:
                c2.close()
        assert not lost()


def test_consume_transform_produce_exactly_once_through_kill_9_of_the_workers():
    with EmbeddedBroker(settings={**SETTINGS, "log.flush.policy": "os"}) as broker:
        create_topic(broker.bootstrap, "k-in", partitions=4)
        create_topic(broker.bootstrap, "k-out", partitions=4)
        values = [f"record-{i}" for i in range(2000)]
        placed = produce_confluent(broker.bootstrap, "k-in", [v.encode() for v in values],
                                   keys=[str(i).encode() for i in range(len(values))])
        ends = [1 + max((o for p, o in placed if p == q), default=-1) for q in range(4)]
        args = [["ctp", broker.bootstrap, "k-ctp", f"k-txn-{i}", "k-in", "k-out", "10"]
                for i in range(2)]
        procs = [_worker(broker, *a) for a in args]
        rng = random.Random(848)
        try:
            for _ in range(4):
                time.sleep(rng.uniform(1.0, 2.0))
                i = rng.randrange(2)
                _kill(procs[i])
                procs[i] = _worker(broker, *args[i])
            deadline = time.monotonic() + 90
            committed: list[int] = []
            while time.monotonic() < deadline and committed != ends:
                committed = _committed(broker, "k-ctp", "k-in", 4)
                time.sleep(0.5)
            assert committed == ends
            assert _group_type(broker, "k-ctp") == "consumer"
        finally:
            for p in procs:
                _kill(p)
        _check_output(broker, values, "k-out", 4)


def _committed(broker: EmbeddedBroker, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        consumer.close()
    return [tp.offset for tp in tps]


def _group_type(broker: EmbeddedBroker, group: str) -> str | None:
    conn = RawConnection(broker.host, broker.port)
    try:
        resp = conn.request(ApiKey.LIST_GROUPS, 5, states_filter=(), types_filter=())
    finally:
        conn.close()
    return next((g.group_type for g in resp.groups if g.group_id == group), None)


def _read_some(config: dict, topic: str, count: int) -> list[tuple[int, int]]:
    """Consume `count` records with this config, commit, leave; their (partition, offset)s."""
    consumer = Consumer({**config, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        for m in consumer.consume(count - len(got), 0.2):
            if m.error() is None:
                got.append((m.partition(), m.offset()))
    consumer.commit(asynchronous=False)
    consumer.close()
    assert len(got) == count
    return got


def test_group_migrated_classic_consumer_classic_keeps_its_offsets():
    with EmbeddedBroker(settings=SETTINGS) as broker:
        create_topic(broker.bootstrap, "mig", partitions=1)
        produce_confluent(broker.bootstrap, "mig", [b"m%d" % i for i in range(90)])
        classic = {"bootstrap.servers": broker.bootstrap, "group.id": "mig-g",
                   "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}
        first = _read_some(classic, "mig", 30)
        assert _group_type(broker, "mig-g") == "classic"
        second = _read_some(consumer_config(broker.bootstrap, "mig-g"), "mig", 30)
        assert _group_type(broker, "mig-g") == "consumer"
        third = _read_some(classic, "mig", 30)
        assert _group_type(broker, "mig-g") == "classic"
        # Each consumer went on from where the previous one committed: nothing read twice.
        assert [o for _, o in first + second + third] == list(range(90))


def test_broker_killed_under_a_live_consumer_group():
    with EmbeddedBroker(settings=SETTINGS) as broker:
        create_topic(broker.bootstrap, "restart", partitions=6)
        # Keyed records: every partition holds some of each round, so a partition whose fetching
        # stopped at the restart shows as records of the second round never delivered.
        values_a = [b"a%d" % i for i in range(60)]
        placed = produce_confluent(broker.bootstrap, "restart", values_a, keys=values_a)
        traces = [_Trace(), _Trace()]
        c1, c2 = (Consumer(consumer_config(broker.bootstrap, "rg", **{"client.id": f"c{i + 1}"},
                                           debug="cgrp,fetch,consumer,topic"),
                           logger=trace.logger) for i, trace in enumerate(traces))
        for c in (c1, c2):
            c.subscribe(["restart"])
        seen: list[str] = []
        missing: set[str] = set()
        report = ""
        try:
            _poll_until([c1, c2], _balanced([c1, c2], [3, 3]), seen, "3 partitions each")
            before = _describe(broker, "rg")
            assert before.group_state == "Stable"
            at_kill = (len(seen), _positions([c1, c2]))
            broker.restart(kill=True)
            after = _describe(broker, "rg")
            # The group, its epochs and its members' assignments came back from the log.
            assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch,
                                                                   before.assignment_epoch)
            assert _owners(after) == _owners(before)
            values_b = [b"b%d" % i for i in range(60)]
            placed_b = produce_confluent(broker.bootstrap, "restart", values_b, keys=values_b)
            wanted = {v.decode() for v in values_b}
            try:
                _poll_until([c1, c2], lambda: wanted <= set(seen), seen,
                            "the records produced after the restart")
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n" + _lost_report(
                    broker, [c1, c2], traces, placed_b, wanted - set(seen), at_kill)) from None
            # The same members carried on: nobody was fenced and rejoined.
            final = _describe(broker, "rg")
            assert {m.member_id for m in final.members} == {m.member_id for m in before.members}
            assert final.group_epoch == before.group_epoch
            missing = {f"a{i}" for i in range(60)} - set(seen)
            if missing:
                report = _lost_report(broker, [c1, c2], traces, placed, missing, at_kill)
        finally:
            c1.close()
            c2.close()
        # One CI run (pytest -n 3 on 2 loaded cores) delivered 37 of the "a" records to no
        # consumer, then with unkeyed records (the second round may have missed the partitions
        # concerned); ~430 runs since did not. The report says where they were.
        assert not missing, report


# librdkafka's debug events that say where a partition's fetch position and offsets went.
_TRACED = frozenset({"ASSIGN", "ASSIGNMENT", "BARRIER", "CLEARASSIGN", "COMMIT", "CONSUME",
                     "CONSUMER", "FETCH", "FETCHDEC", "FETCHERR", "HEARTBEAT", "OFFFETCH",
                     "OFFSET", "OFFSETFETCH", "OFFSETVALID", "PAUSE", "REMOVE", "RESUME",
                     "SRVPEND", "STORETERM", "VALIDATE"})


class _Trace(logging.Handler):
    """A consumer's librdkafka debug events about its assignment, offsets and fetching (no
    connection chatter, heartbeats only with an assignment), kept for a failure's report."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        # Not registered with logging (getLogger would keep it for good): it goes with the test.
        self.logger = logging.Logger("rdkafka", logging.DEBUG)  # noqa: LOG001
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        # confluent-kafka logs (facility, client name, text): the facility says what it is about.
        tag = record.args[0] if isinstance(record.args, tuple) and record.args else None
        message = record.getMessage()
        if tag in _TRACED and (tag != "HEARTBEAT" or "assignment" in message):
            self.lines.append(f"{record.created:.3f} {message}")


def _positions(consumers: list[Consumer]) -> dict[str, dict[int, int]]:
    """Each consumer's partitions and positions (the next offset it delivers; -1001: none yet)."""
    return {f"c{i + 1}": {tp.partition: tp.offset for tp in c.position(c.assignment())}
            for i, c in enumerate(consumers)}


def _lost_report(broker: EmbeddedBroker, consumers: list[Consumer], traces: list[_Trace],
                 placed: list[tuple[int, int]], missing: set[str],
                 at_kill: tuple[int, dict[str, dict[int, int]]]) -> str:
    """Where the records never delivered are, where the consumers and the group are, what the
    broker did at its restart and what each consumer's librdkafka did."""
    where = sorted((placed[int(v[1:])], v) for v in missing)
    ends = [consumers[0].get_watermark_offsets(TopicPartition("restart", p), timeout=10)
            for p in range(6)]
    return "\n".join([
        f"{len(missing)} records never delivered, ((partition, offset), value): {where}",
        (f"delivered before the kill: {at_kill[0]}; positions at the kill: {at_kill[1]}, "
         f"at the end: {_positions(consumers)}"),
        f"committed: {_committed(broker, 'rg', 'restart', 6)}",
        f"(log start, log end) per partition: {ends}",
        "the broker's recovery of the partitions, its warnings and the group's events:",
        *(line for line in broker.log_text().splitlines()
          if "/restart-" in line or " rg" in line or " WARNING " in line or " ERROR " in line),
        *(f"c{i + 1}: {line}" for i, trace in enumerate(traces) for line in trace.lines)])


def test_online_upgrade_and_downgrade_with_a_live_classic_member():
    with EmbeddedBroker(settings=SETTINGS) as broker:
        create_topic(broker.bootstrap, "live", partitions=6)
        sent = [f"l{i}" for i in range(120)]
        produce_confluent(broker.bootstrap, "live", [v.encode() for v in sent[:60]])
        classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lg",
                            "client.id": "classic", "auto.offset.reset": "earliest",
                            "enable.auto.commit": False, "session.timeout.ms": 6000,
                            "heartbeat.interval.ms": 300})
        classic.subscribe(["live"])
        modern = None
        seen: list[str] = []
        try:
            _poll_until([classic], _balanced([classic], [6]), seen, "the classic member alone")
            assert _group_type(broker, "lg") == "classic"
            # A consumer-protocol member joins the live classic group: it becomes a consumer
            # group, with the classic member in it, and the partitions are shared.
            modern = Consumer(consumer_config(broker.bootstrap, "lg", **{"client.id": "modern"}))
            modern.subscribe(["live"])
            _poll_until([classic, modern], _balanced([classic, modern], [3, 3]), seen, "3 each")
            described = _describe(broker, "lg")
            assert sorted(m.member_type for m in described.members) == [0, 1]  # classic, consumer
            produce_confluent(broker.bootstrap, "live", [v.encode() for v in sent[60:]])
            # The last consumer-protocol member leaves: back to a classic group.
            modern.close()
            modern = None
            _poll_until([classic], _balanced([classic], [6]), seen, "the classic member alone")
            assert _group_type(broker, "lg") == "classic"
            everything = [TopicPartition("live", p) for p in range(6)]

            def all_committed() -> bool:
                committed = classic.committed(everything, timeout=10)
                return sum(max(tp.offset, 0) for tp in committed) == len(sent)

            _poll_until([classic], all_committed, seen, "every record's offset committed")
        finally:
            classic.close()
            if modern is not None:
                modern.close()
        assert set(sent) <= set(seen)  # none lost
        # ... and the group kept every position: each partition's end offset, or none (-1001)
        # for a partition the producer's sticky partitioner gave no record.
        ends = end_offsets(broker.bootstrap, "live", 6)
        assert sum(ends) == len(sent)
        assert _committed(broker, "lg", "live", 6) == [end or -1001 for end in ends]
