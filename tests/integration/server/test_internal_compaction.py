"""The coordinators' internal topics stay bounded by what is live (issue 13): after many
transactions of a few transactional ids and many offset commits of a few groups, the log cleaner
shrinks `__transaction_state` and `__consumer_offsets` on disk to a size that follows the live ids
and groups, not the history, and a restart (kill -9) restores the same coordinator state, as
DescribeTransactions and OffsetFetch tell. The history is written with the cleaner off (when it
runs, the topics never grow: tests/integration/server/test_compaction.py shows it at work while
producers write)."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from exactly.client import Admin
from exactly.testing import EmbeddedBroker
from tests.support import create_topic

SEGMENT = 16 * 1024
SETTINGS = {
    "log.cleaner.backoff.ms": "100",
    "transaction.state.log.num.partitions": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.segment.bytes": str(SEGMENT),
    "offsets.topic.segment.bytes": str(SEGMENT),
}
IDS = [f"shrink-{i}" for i in range(3)]
GROUPS = ["g-a", "g-b"]


def log_bytes(broker: EmbeddedBroker, topic: str) -> int:
    return sum(p.stat().st_size for p in (Path(broker.data_dir) / f"{topic}-0").glob("*.log"))


def coordinator_state(bootstrap: str) -> tuple[dict[str, tuple[str, int, int]], dict[str, list[int]]]:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        described = admin.describe_transactions(IDS)
    txns = {tid: (d.state, d.producer_id, d.producer_epoch) for tid, d in described.items()}
    admin_client = AdminClient({"bootstrap.servers": bootstrap})
    offsets = {}
    for group in GROUPS:
        future = admin_client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
        result = future[group].result(10)
        offsets[group] = sorted((tp.partition, tp.offset) for tp in result.topic_partitions)
    return txns, offsets


def wait_below(broker: EmbeddedBroker, topic: str, limit: int, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    size = log_bytes(broker, topic)
    while size > limit and time.monotonic() < deadline:
        time.sleep(0.2)
        size = log_bytes(broker, topic)
    assert size <= limit, f"{topic} still holds {size} bytes of log (limit {limit})"
    return size


def test_internal_topics_shrink_to_what_is_live(broker_factory) -> None:
    # The history is written with the cleaner off, so that its size can be seen.
    broker = broker_factory(settings={**SETTINGS, "log.cleaner.enable": "false"})
    create_topic(broker.bootstrap, "payload", partitions=2)
    for tid in IDS:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid,
                             "linger.ms": 0})
        producer.init_transactions(10)
        for n in range(150):
            producer.begin_transaction()
            producer.produce("payload", f"{tid}-{n}".encode(), partition=n % 2)
            producer.commit_transaction(10)
    for group in GROUPS:
        committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                              "enable.auto.commit": False})
        for n in range(200):
            committer.commit(offsets=[TopicPartition("payload", 0, n), TopicPartition("payload", 1, n)],
                             asynchronous=False)
        committer.close()

    # The history: 450 transactions of 3 ids (several records each) and 400 offset commits.
    txn_history = log_bytes(broker, "__transaction_state")
    offsets_history = log_bytes(broker, "__consumer_offsets")
    assert txn_history > 6 * SEGMENT and offsets_history > 3 * SEGMENT, (txn_history, offsets_history)
    before = coordinator_state(broker.bootstrap)
    assert all(state == "CompleteCommit" for state, _, _ in before[0].values()), before
    assert before[1] == {g: [(0, 199), (1, 199)] for g in GROUPS}

    broker.stop()
    broker.settings["log.cleaner.enable"] = "true"
    broker.start()
    # Cleaned: what stays is the active segment and at most one rolled one not yet worth a clean.
    txn_now = wait_below(broker, "__transaction_state", 2 * SEGMENT + 4096)
    offsets_now = wait_below(broker, "__consumer_offsets", 2 * SEGMENT + 4096)
    assert txn_now < txn_history / 3 and offsets_now < offsets_history / 1.5
    assert coordinator_state(broker.bootstrap) == before
    broker.kill()
    broker.start()
    assert coordinator_state(broker.bootstrap) == before
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": IDS[0]})
    producer.init_transactions(10)  # the id's epoch came back: the next one is handed out
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        again = admin.describe_transactions([IDS[0]])[IDS[0]]
    assert (again.producer_id, again.producer_epoch) == (before[0][IDS[0]][1],
                                                         before[0][IDS[0]][2] + 1)
