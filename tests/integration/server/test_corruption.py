"""Corrupt bytes on disk found and reported by a broker process (issue 14, item 5), over TCP with
confluent-kafka:

- a flipped byte in the unflushed tail (past the recovery point) after kill -9: recovery cuts
  the log at that batch with a WARN naming the file, offset, position and reason, and the
  broker serves everything before it;
- a flipped byte in an older, sealed segment (trusted at start, as Kafka trusts it): a consumer
  gets the records before the bad batch and CORRUPT_MESSAGE at it, the broker logs an ERROR
  naming the file and offset and counts it on /metrics, and the other partitions are served.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from exactly.log.checkpoints import RECOVERY_POINT_CHECKPOINT, read_checkpoint
from exactly.log.segment import segment_name
from exactly.protocol.records import HEADER_SIZE, RecordBatchHeader, iter_batches
from exactly.testing import BrokerStartError, EmbeddedBroker
from tests.support import create_topic, produce_confluent


def metrics_text(broker: EmbeddedBroker) -> str:
    """/metrics of the broker's latest start (each start binds a new port)."""
    url = [line.split(" on ", 1)[1].strip() for line in broker.stdout_lines
           if line.startswith("Exactly metrics on ")][-1]
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x10
    path.write_bytes(bytes(data))


def batches(path: Path) -> list[RecordBatchHeader]:
    return list(iter_batches(path.read_bytes()))


def produce_batches(bootstrap: str, topic: str, prefix: str, count: int) -> list[tuple[bytes, int]]:
    """`count` batches of 10 records, one produce call (and flush) each: (value, offset)."""
    out: list[tuple[bytes, int]] = []
    for b in range(count):
        values = [f"{prefix}-{b}-{i}".encode() * 8 for i in range(10)]
        placed = produce_confluent(bootstrap, topic, values)
        out += [(value, offset) for value, (_, offset) in zip(values, placed, strict=True)]
    return out


def read_until_stuck(bootstrap: str, topic: str, partitions: int,
                     quiet: float = 6.0) -> tuple[dict[int, list[bytes]], list[KafkaError]]:
    """Every record a consumer gets from the start of each partition, until nothing new comes
    for `quiet` seconds; and the errors it was given."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"c-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "fetch.error.backoff.ms": 100})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    errors: list[KafkaError] = []
    last_new = time.monotonic()
    try:
        while time.monotonic() - last_new < quiet:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                errors.append(msg.error())
                continue
            got[msg.partition()].append(msg.value())
            last_new = time.monotonic()
    finally:
        consumer.close()
    return got, errors


def test_a_flipped_byte_in_the_unflushed_tail_is_cut_by_recovery_after_kill9() -> None:
    # No periodic checkpoint: the recovery point is where the clean stop left it.
    settings = {"log.flush.offset.checkpoint.interval.ms": 3_600_000, "log.flush.policy": "os"}
    with EmbeddedBroker(settings=settings) as broker:
        create_topic(broker.bootstrap, "tail")
        flushed = produce_batches(broker.bootstrap, "tail", "flushed", 3)
        broker.stop()  # clean: the recovery point is the end of `flushed`
        point = read_checkpoint(broker.data_dir / RECOVERY_POINT_CHECKPOINT)[("tail", 0)]
        assert point == len(flushed)
        broker.start()
        unflushed = produce_batches(broker.bootstrap, "tail", "unflushed", 5)
        broker.kill()

        path = broker.data_dir / "tail-0" / segment_name(0, ".log")
        bad = next(b for b in batches(path) if b.base_offset >= point + 20)  # the third one
        flip(path, bad.position + HEADER_SIZE + 30)
        log_before = len(broker.log_text())
        broker.start()
        restart_log = broker.log_text()[log_before:]

        assert f"event=segment_recovered dir={path.parent} segment=0 from_offset={point} " \
            in restart_log
        warn = next(line for line in restart_log.splitlines() if "event=log_truncated" in line)
        assert " WARNING " in warn or " WARN " in warn, warn
        assert (f"event=log_truncated file={path} offset={bad.base_offset} "
                f"position={bad.position} ") in warn
        assert "reason=record batch CRC mismatch" in warn
        kept = [value for value, offset in flushed + unflushed if offset < bad.base_offset]
        assert len(kept) == point + 20
        got, errors = read_until_stuck(broker.bootstrap, "tail", 1, quiet=3.0)
        assert got[0] == kept and not errors


def test_a_corrupt_older_segment_is_served_up_to_the_bad_batch() -> None:
    settings = {"metrics.listen": "127.0.0.1:0"}
    with EmbeddedBroker(settings=settings) as broker:
        create_topic(broker.bootstrap, "old", partitions=2, config={"segment.bytes": "16384"})
        values = [f"record {i:05d} ".encode() * 6 for i in range(1200)]
        placed = produce_confluent(broker.bootstrap, "old", values,
                                   keys=[str(i).encode() for i in range(1200)],
                                   extra={"batch.size": 4096})
        broker.stop()

        directory = broker.data_dir / "old-0"
        second = sorted(directory.glob("*.log"))[1]
        bad = batches(second)[1]
        flip(second, bad.end - 3)  # in the last record's value: covered by the CRC
        broker.start()
        got, errors = read_until_stuck(broker.bootstrap, "old", 2)

        by_partition = {p: [v for v, (q, o) in sorted(zip(values, placed, strict=True),
                                                       key=lambda x: x[1][1]) if q == p]
                        for p in (0, 1)}
        offsets0 = sorted(o for q, o in placed if q == 0)
        assert got[1] == by_partition[1]  # the other partition, in full
        assert got[0] == by_partition[0][: offsets0.index(bad.base_offset)]
        # Kafka's CORRUPT_MESSAGE (2) is librdkafka's INVALID_MSG.
        assert any(e.code() == KafkaError.INVALID_MSG for e in errors), errors

        log = broker.log_text()
        error = next(line for line in log.splitlines() if "event=corrupt_batch" in line)
        assert " ERROR " in error, error
        assert (f"event=corrupt_batch file={second} offset={bad.base_offset} "
                f"position={bad.position} ") in error
        metrics = metrics_text(broker)
        assert 'exactly_log_corrupt_batches_total{partition="0",topic="old"} 1.0' in metrics
        assert 'exactly_log_corrupt_batches_total{partition="1",topic="old"} 0.0' in metrics
        # Still serving: a new record on the damaged partition's topic is acknowledged.
        assert produce_confluent(broker.bootstrap, "old", [b"after"])


def test_a_corrupt_coordinator_log_stops_the_start_with_one_error_line(
        broker: EmbeddedBroker) -> None:
    """A flipped byte in `__transaction_state`, in bytes trusted at start: the coordinator
    cannot load its state, so the broker does not start (a skipped batch could bring back an
    older state of a transaction); it says which file and offset, and how to list the damage."""
    from confluent_kafka import Producer

    create_topic(broker.bootstrap, "paid")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "payer"})
    producer.init_transactions(30)
    for n in range(5):
        producer.begin_transaction()
        producer.produce("paid", f"p{n}".encode())
        producer.commit_transaction(30)
    broker.stop()  # clean: everything below the recovery point, trusted at the next start
    logs = [p for p in broker.data_dir.glob("__transaction_state-*/*.log") if p.stat().st_size]
    assert len(logs) == 1, logs
    flip(logs[0], batches(logs[0])[-1].position + HEADER_SIZE + 2)  # the last record's body
    with pytest.raises(BrokerStartError):  # it must not start on a corrupt __transaction_state
        broker.start()
    last = broker.log_text().strip().splitlines()[-1]
    assert last.startswith("error: cannot load the coordinators' state: "), last
    assert str(logs[0]) in last and "is corrupt" in last and "exactly log verify" in last, last
    assert "Traceback" not in broker.log_text()
