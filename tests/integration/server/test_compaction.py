"""Log compaction over TCP with confluent-kafka (issue 13): a compacted topic written with keys,
tombstones and transactions is cleaned by the broker's log cleaner and read back; idempotent
producers keep producing after their old batches were cleaned away, across a kill -9 too; the
cleaner's figures are on /metrics; a topic deleted in the middle of its clean."""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from exactly import failpoints
from exactly.log.checkpoints import CLEANER_CHECKPOINT, read_checkpoint
from exactly.testing import EmbeddedBroker
from tests.support import create_topic

CLEANER = {"log.cleaner.backoff.ms": "100"}
# Small segments that roll often, cleaned as soon as anything is dirty; tombstones kept 1 hour.
TOPIC = {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01",
         "delete.retention.ms": "3600000"}


def wait_cleaned(broker: EmbeddedBroker, topic: str, at_least: int, timeout: float = 60) -> int:
    """Wait until the cleaner's checkpoint says `topic`-0 was cleaned up to `at_least`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cleaned = read_checkpoint(Path(broker.data_dir) / CLEANER_CHECKPOINT).get((topic, 0), 0)
        if cleaned >= at_least:
            return cleaned
        time.sleep(0.1)
    raise AssertionError(f"{topic}-0 not cleaned up to {at_least} within {timeout} s:\n"
                         f"{broker.log_tail(40)}")


def read_all(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record from the start to the end of partition 0."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{time.monotonic_ns()}",
                         "enable.partition.eof": True, "isolation.level": isolation,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return out
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    raise AssertionError(f"no end of {topic}-0 within 30 s; read {len(out)} records")


def newest(records: list[tuple[int, bytes, bytes | None]]) -> dict[bytes, bytes | None]:
    found: dict[bytes, bytes | None] = {}
    for _offset, key, value in records:
        found[key] = value
    return found


def test_compacted_topic_is_cleaned_and_read_back(broker_factory) -> None:
    broker = broker_factory(settings={**CLEANER, "metrics.listen": "127.0.0.1:0"})
    create_topic(broker.bootstrap, "compacted", config=TOPIC)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    expected: dict[bytes, bytes | None] = {}
    for round_ in range(30):
        for k in range(10):
            key, value = f"key-{k}".encode(), f"value-{round_}-{k}".encode() * 4
            if k == 3 and round_ == 29:
                value = None  # a tombstone: key-3 is deleted
            plain.produce("compacted", value, key=key)
            expected[key] = value
        plain.flush(10)
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "compaction-t"})
    txn.init_transactions(10)
    txn.begin_transaction()
    txn.produce("compacted", b"aborted", key=b"key-5")
    txn.produce("compacted", b"aborted", key=b"only-aborted")
    txn.flush(10)
    txn.abort_transaction(10)
    txn.begin_transaction()
    txn.produce("compacted", b"committed", key=b"key-6")
    txn.commit_transaction(10)
    expected[b"key-6"] = b"committed"
    for k in range(10):  # roll past everything above: it all becomes cleanable
        plain.produce("compacted", b"x" * 300, key=f"filler-{k}".encode())
        expected[f"filler-{k}".encode()] = b"x" * 300
        plain.flush(10)
    end = read_all(broker.bootstrap, "compacted")[-1][0] + 1

    wait_cleaned(broker, "compacted", end - 10)
    records = read_all(broker.bootstrap, "compacted")
    assert newest(records) == expected
    # 300 plain records became about one per key; offsets only grow, with gaps.
    assert len(records) < 60, len(records)
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(set(offsets))
    assert (b"key-3", None) in [(k, v) for _, k, v in records]  # the tombstone stays (1 hour)
    uncommitted = read_all(broker.bootstrap, "compacted", "read_uncommitted")
    assert b"aborted" not in [v for _, _, v in uncommitted]  # aborted records are gone

    with urllib.request.urlopen(_metrics_url(broker), timeout=10) as answer:
        metrics = answer.read().decode()
    assert "exactly_log_cleaner_runs_total" in metrics
    runs = [line for line in metrics.splitlines() if line.startswith("exactly_log_cleaner_runs_total")]
    assert float(runs[0].split()[-1]) >= 1
    assert 'exactly_log_cleaner_dirty_ratio{partition="0",topic="compacted"}' in metrics


def _metrics_url(broker: EmbeddedBroker) -> str:
    for line in broker.stdout_lines:
        if line.startswith("Exactly metrics on "):
            return line.split(" on ", 1)[1].strip()
    raise AssertionError(f"the broker printed no metrics address: {broker.stdout_lines}")


def test_idempotent_producer_goes_on_after_its_batches_were_cleaned(broker_factory) -> None:
    broker = broker_factory(settings=CLEANER)
    create_topic(broker.bootstrap, "idem", config=TOPIC)
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "linger.ms": 0})

    def write(rounds: int, tag: str) -> None:
        for r in range(rounds):
            for k in range(5):
                producer.produce("idem", f"{tag}-{r}".encode() * 10, key=f"k{k}".encode(),
                                 on_delivery=report)
            producer.flush(10)

    write(40, "first")
    end = read_all(broker.bootstrap, "idem")[-1][0] + 1
    for _ in range(2):  # 2 x 1500 bytes > segment.bytes: the second one is in a new segment
        producer.produce("idem", b"y" * 1500, key=b"roll", on_delivery=report)
        producer.flush(10)
    wait_cleaned(broker, "idem", end)
    write(20, "second")  # the same producer, its earlier batches cleaned away
    broker.kill()
    broker.start()
    write(20, "third")  # after a crash: the producer state came back from snapshots and log
    producer.flush(30)
    assert errors == []
    assert newest(read_all(broker.bootstrap, "idem")) == {
        **{f"k{k}".encode(): b"third-19" * 10 for k in range(5)}, b"roll": b"y" * 1500}


def test_a_topic_deleted_while_it_is_being_cleaned(broker_factory) -> None:
    """DeleteTopics while the cleaner is inside a clean of that topic (held at a fault point):
    the clean is dropped, the directory goes, the broker goes on, and the name can be reused."""
    env = {k: v for k, v in os.environ.items() if k != failpoints.ENV}
    env[failpoints.ENV] = "log.cleaner.after_cleaned=pause:3"
    broker = broker_factory(settings=CLEANER, env=env)
    create_topic(broker.bootstrap, "doomed", config=TOPIC)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for n in range(40):
        producer.produce("doomed", b"v" * 200, key=f"k{n % 3}".encode())
        producer.flush(10)
    partition = Path(broker.data_dir) / "doomed-0"
    deadline = time.monotonic() + 30
    while not any(p.name.endswith(".cleaned") for p in partition.glob("*")):
        assert time.monotonic() < deadline, "the cleaner never began a clean of the topic"
        time.sleep(0.05)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics(["doomed"])["doomed"].result(10)
    time.sleep(3.5)  # the pause ends: the worker finds its partition gone
    assert broker.running and not partition.exists()
    assert "event=log_clean_stopped partition=doomed-0" in broker.log_text()
    create_topic(broker.bootstrap, "doomed", config=TOPIC)
    producer.produce("doomed", b"again", key=b"k")
    producer.flush(10)
    assert read_all(broker.bootstrap, "doomed") == [(0, b"k", b"again")]
