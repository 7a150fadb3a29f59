"""Exactly's client on a three-node Apache Kafka 4.4 cluster (replication factor 3,
min.insync.replicas=2): partitions led by different nodes, the group and transaction
coordinators elsewhere again, and nodes killed with SIGKILL while the client works.

What each test shows is what a Kafka user relies on when a node dies: acknowledged records are
kept once and in order (idempotence across a leader change), a transaction interrupted by the
loss of its coordinator or of a partition's leader still ends committed or aborted as a whole,
a group follows its coordinator to another node without losing or rewinding its committed
offsets, and another process can take over an open transaction by its producer id and epoch.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict

import pytest

from exactly.client import (
    Admin,
    Consumer,
    OffsetSpec,
    Producer,
    TransactionSession,
    UnsupportedVersionError,
)
from tests.helpers.cluster.support import (
    create_replicated,
    group_coordinator,
    leaders,
    transaction_coordinator,
    wait_for,
)
from tests.paths import SRC
from tests.rigs.kafka import ApacheKafka

pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("kafka-cluster")]


def read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    """Every record of `topic`, by partition, read with read_committed without a group once no
    transaction is open on it: EndTxn returns before the coordinator has written every marker,
    so the read waits until each partition's last stable offset has reached its high
    watermark."""
    admin = Admin({"bootstrap.servers": bootstrap})

    def ends(level: str) -> dict[int, int]:
        answers = admin.list_offsets({(topic, p): OffsetSpec.latest()
                                      for p in range(partitions)}, isolation_level=level)
        return {tp.partition: info.offset for tp, info in answers.items()}

    try:
        settled = wait_for(f"{topic}: every transaction's markers written",
                           lambda: (e := ends("read_committed")) == ends("read_uncommitted")
                           and e)
    finally:
        admin.close()
    out: dict[int, list[bytes]] = defaultdict(list)
    consumer = Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + 120
        while any(consumer.position((topic, p)) < end for p, end in settled.items()):
            assert time.monotonic() < deadline, f"{topic} not read to its end in 120 s"
            for r in consumer.poll(500):
                assert r.value is not None
                out[r.partition].append(r.value)
    finally:
        consumer.close()
    return out


def test_idempotent_writes_survive_a_leader_kill_once_and_in_order(
        whole_cluster: ApacheKafka, admin: Admin) -> None:
    create_replicated(admin, "idem", 3)
    victim = leaders(admin, "idem")[0]
    producer = Producer({"bootstrap.servers": whole_cluster.bootstrap, "acks": "all",
                         "linger.ms": 5, "delivery.timeout.ms": 120_000})
    acked: list[int] = []  # the numbers of the records acknowledged
    failed: list[BaseException] = []
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            future = producer.send("idem", value=b"%d" % i, partition=i % 3)
            future.add_done_callback(lambda f, i=i: failed.append(e) if (e := f.exception())
                                     else acked.append(i))
            i += 1
            if i % 50 == 0:
                time.sleep(0.01)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        wait_for("300 records acknowledged", lambda: len(acked) >= 300)
        whole_cluster.kill(victim)
        at_kill = len(acked)
        wait_for(f"1,000 more acknowledged without node {victim}",
                 lambda: len(acked) >= at_kill + 1000 or failed)
        assert leaders(admin, "idem")[0] not in (victim, -1)
    finally:
        stop.set()
        writer.join(30)
        producer.flush(120)
        producer.close()
    assert not failed, failed[:3]

    got = read_all(whole_cluster.bootstrap, "idem", 3)
    for partition, values in got.items():
        numbers = [int(v) for v in values]
        # Sent in this order on each partition; idempotence keeps the order across the retries
        # to the new leader and writes no record twice.
        assert numbers == sorted(set(numbers)), f"partition {partition} reordered or duplicated"
    read = {int(v) for values in got.values() for v in values}
    assert set(acked) <= read, f"acknowledged, not there: {sorted(set(acked) - read)[:10]}"


@pytest.mark.parametrize("victim", ["coordinator", "leader"])
def test_a_transaction_interrupted_by_a_node_kill_ends_whole(
        whole_cluster: ApacheKafka, admin: Admin, victim: str) -> None:
    topic = f"txn-{victim}"
    create_replicated(admin, topic, 3)
    txn_id = f"cluster-{victim}"
    config = {"bootstrap.servers": whole_cluster.bootstrap, "transactional.id": txn_id,
              "acks": "all"}
    producer = Producer(config)
    producer.init_transactions()
    committed: list[bytes] = []
    outcomes: list[str] = []
    for n in range(30):
        values = [b"%d-%d" % (n, i) for i in range(10)]
        producer.begin_transaction()
        for i, value in enumerate(values[:5]):
            producer.send(topic, value=value, partition=i % 3)
        if n == 10:  # mid-transaction: records sent, nothing committed yet
            node = (transaction_coordinator(admin, txn_id) if victim == "coordinator"
                    else leaders(admin, topic)[0])
            whole_cluster.kill(node)
        for i, value in enumerate(values[5:], start=5):
            producer.send(topic, value=value, partition=i % 3)
        try:
            producer.commit_transaction()
        except Exception as exc:  # noqa: BLE001 - the interrupted one may fail; it must abort
            outcomes.append(f"{n}: {type(exc).__name__}")
            producer.abort_transaction()
        else:
            committed += values
        if n == 20:
            whole_cluster.start(node)
    producer.close()

    got = read_all(whole_cluster.bootstrap, topic, 3)
    assert sorted(v for vs in got.values() for v in vs) == sorted(committed), outcomes
    # Each transaction whole: none partly there.
    for n in range(30):
        there = sum(1 for vs in got.values() for v in vs if v.startswith(b"%d-" % n))
        assert there in (0, 10), f"transaction {n}: {there} of its 10 records"
    assert len(committed) >= 290, outcomes  # at most the interrupted one aborted
    states = {t.transactional_id: t.state for t in admin.list_transactions()}
    assert states[txn_id] in ("CompleteCommit", "CompleteAbort", "Empty")


@pytest.mark.parametrize("group_protocol", ["classic"])
def test_a_group_follows_its_coordinator_to_another_node(
        whole_cluster: ApacheKafka, admin: Admin, group_protocol: str) -> None:
    topic, group = f"grp-{group_protocol}", f"g-{group_protocol}"
    create_replicated(admin, topic, 3)
    producer = Producer({"bootstrap.servers": whole_cluster.bootstrap, "acks": "all"})
    for i in range(600):
        producer.send(topic, value=b"%d" % i, partition=i % 3)
    producer.flush(60)
    producer.close()

    consumer = Consumer({"bootstrap.servers": whole_cluster.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "max.poll.records": 20})
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    commits: list[dict[int, int]] = []
    killed = None
    try:
        deadline = time.monotonic() + 240
        while len(seen) < 600:
            assert time.monotonic() < deadline, f"{len(seen)} of 600 consumed"
            records = consumer.poll(500)
            seen.update(r.value for r in records if r.value is not None)
            if records:
                consumer.commit()
            if killed is None and len(seen) >= 200:
                killed = group_coordinator(admin, group)
                whole_cluster.kill(killed)
            committed = consumer.committed([(topic, p) for p in range(3)])
            commits.append({tp.partition: o or 0 for tp, o in committed.items()})
    finally:
        consumer.close()
    assert killed is not None
    assert group_coordinator(admin, group) != killed
    final = admin.list_consumer_group_offsets(group)
    assert sum(o.offset for o in final.values()) == 600
    for before, after in itertools.pairwise(commits):
        assert all(after[p] >= before[p] for p in before), (before, after)


WRITER = """
import sys
from exactly.client import Producer
bootstrap, topic, txn_id = sys.argv[1:4]
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "acks": "all"})
producer.init_transactions()
producer.begin_transaction()
for i in range(50):
    producer.send(topic, value=b"r%d" % i, partition=i % 3)
producer.flush()
session = producer.transaction_session
print(session.producer_id, session.producer_epoch, flush=True)
sys.stdin.read()  # holds the transaction open until killed
"""


def test_another_process_commits_an_open_transaction_by_its_producer_id(
        whole_cluster: ApacheKafka, admin: Admin) -> None:
    """The recovery `transactionResume=producer-id` relies on (Flink's KafkaSink before
    FLIP-319): the writer dies with its transaction open; another process resumes it by
    producer id and epoch and commits it, even after the coordinator's node died too."""
    create_replicated(admin, "resumed", 3)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, whole_cluster.bootstrap, "resumed", "resumed-txn"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)})
    try:
        assert writer.stdout is not None
        producer_id, epoch = map(int, writer.stdout.readline().split())
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert admin.describe_transactions(["resumed-txn"])["resumed-txn"].state == "Ongoing"
    whole_cluster.kill(transaction_coordinator(admin, "resumed-txn"))

    session = TransactionSession.resume("resumed-txn", producer_id, epoch,
                                        {"bootstrap.servers": whole_cluster.bootstrap})
    session.commit_transaction()
    session.close()
    got = read_all(whole_cluster.bootstrap, "resumed", 3)
    assert sorted(v for vs in got.values() for v in vs) == sorted(b"r%d" % i for i in range(50))


def test_two_phase_commit_is_refused_with_the_reason(whole_cluster: ApacheKafka) -> None:
    """Kafka 4.4 offers InitProducerId up to v5: KIP-939's Enable2Pc and KeepPreparedTxn are
    not there, and the session says so before it sends anything."""
    session = TransactionSession({"bootstrap.servers": whole_cluster.bootstrap,
                                  "transactional.id": "two-phase",
                                  "transaction.two.phase.commit.enable": "true"})
    try:
        with pytest.raises(UnsupportedVersionError, match="InitProducerId v6"):
            session.initialize(keep_prepared_txn=True)
    finally:
        session.close()


def test_admin_sees_the_three_nodes_and_where_each_coordinator_is(
        whole_cluster: ApacheKafka, admin: Admin) -> None:
    cluster = admin.describe_cluster()
    assert sorted(b.node_id for b in cluster.brokers) == whole_cluster.node_ids
    create_replicated(admin, "spread", 6)
    described = admin.describe_topics(["spread"])["spread"]
    assert all(sorted(p.replicas) == whole_cluster.node_ids for p in described.partitions)
    assert len({p.leader for p in described.partitions}) > 1  # leaders on different nodes

    producers = {}
    for name in ("a", "b", "c", "d", "e", "f"):
        p = Producer({"bootstrap.servers": whole_cluster.bootstrap,
                      "transactional.id": f"spread-{name}"})
        p.init_transactions()
        p.begin_transaction()
        p.send("spread", value=name)
        p.flush()
        producers[name] = p
    try:
        # ListTransactions is asked of every node; each id is described by its coordinator.
        ongoing = {t.transactional_id for t in admin.list_transactions(states=["Ongoing"])}
        assert {f"spread-{n}" for n in producers} <= ongoing
        described_txns = admin.describe_transactions([f"spread-{n}" for n in producers])
        assert {d.coordinator_id for d in described_txns.values()} <= set(whole_cluster.node_ids)
        assert all(d.state == "Ongoing" for d in described_txns.values())
    finally:
        for p in producers.values():
            p.abort_transaction()
            p.close()
