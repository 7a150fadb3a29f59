"""What transactions cost, with confluent-kafka, side by side in one run.

1. Throughput of a 1 KiB stream written in transactions of 100 ms against the same stream written
   idempotently without transactions (figure published for Kafka: at most 3% lost), on Exactly
   and on the mock: what the client itself loses by stopping at each commit shows in the mock's
   figure.
2. Sequential 1-record transactions per second from one producer: Exactly against librdkafka's
   mock cluster (which has a transaction coordinator of its own).

Exactly runs with `log.flush.policy=os` (as durable as the mock: neither fsyncs) and with the
default `fsync`.

    .venv/bin/python bench/transactions.py [--quick] [--only tiny|stream] [--policy os|fsync]
"""

from __future__ import annotations

import argparse
import os
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from exactly.testing import EmbeddedBroker

PARTITIONS = 4


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)


def stream(bootstrap: str, topic: str, count: int, *, txn_ms: int | None) -> float:
    """Records per second of `count` 1 KiB records; with `txn_ms`, a commit every txn_ms."""
    # A bounded local queue (20k records, about 80 ms of sending) for both streams: a commit
    # waits for everything queued, and an unbounded backlog makes that wait, and the figure,
    # depend on how far the client ran ahead rather than on what a transaction costs.
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "queue.buffering.max.messages": 20_000}
    if txn_ms is not None:
        conf["transactional.id"] = f"bench-stream-{time.monotonic_ns()}"
    producer = Producer(conf)
    payload = os.urandom(1024)
    if txn_ms is not None:
        producer.init_transactions(30)
        producer.begin_transaction()
    else:
        # The idempotent producer gets its producer id asynchronously (init_transactions waits
        # for it): without a warm-up that wait would be timed.
        producer.produce(topic, b"warm-up")
        producer.flush(30)
    started = time.perf_counter()
    last_commit = started
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
        if txn_ms is not None and (time.perf_counter() - last_commit) * 1000 >= txn_ms:
            producer.commit_transaction(30)
            producer.begin_transaction()
            last_commit = time.perf_counter()
    if txn_ms is not None:
        producer.commit_transaction(30)
    else:
        producer.flush(60)
    return count / (time.perf_counter() - started)


def tiny_transactions(bootstrap: str, topic: str, seconds: float) -> float:
    """Sequential transactions of one record each, per second."""
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": f"bench-tiny-{time.monotonic_ns()}", "linger.ms": 0})
    producer.init_transactions(30)
    done = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        producer.begin_transaction()
        producer.produce(topic, b"x" * 100)
        producer.commit_transaction(30)
        done += 1
    return done / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    parser.add_argument("--only", choices=("tiny", "stream"),
                        help="run one of the two measurements (the other's columns print 0)")
    parser.add_argument("--policy", choices=("os", "fsync"), action="append",
                        help="log.flush.policy to run Exactly with (repeatable; default both)")
    args = parser.parse_args()
    run_tiny, run_stream = args.only in (None, "tiny"), args.only in (None, "stream")
    count = 40_000 if args.quick else 400_000  # long enough for dozens of 100 ms transactions
    seconds = 2.0 if args.quick else 8.0

    mock = Producer({"test.mock.num.brokers": 1})  # hosts the mock cluster for this run
    (meta,) = mock.list_topics(timeout=10).brokers.values()
    mock_bootstrap = f"{meta.host}:{meta.port}"
    mock_tps = mock_plain = mock_txn = 0.0
    if run_tiny:
        mock_tps = max(tiny_transactions(mock_bootstrap, "mock-tiny", seconds) for _ in range(2))
    if run_stream:
        # The mock keeps only 5 MiB per partition, which does not matter when nothing reads back.
        mock_plain, mock_txn = _streams(mock_bootstrap, "mock-plain", "mock-txn", count)

    print(f"{'target':<16} {'idempotent rec/s':>17} {'100 ms txns rec/s':>18} {'loss':>7}   "
          f"{'1-record txns/s':>16} {'vs mock':>8}")
    print(f"{'librdkafka mock':<16} {mock_plain:>17,.0f} {mock_txn:>18,.0f} "
          f"{_loss(mock_plain, mock_txn):>6.1f}%   {mock_tps:>16,.0f} {1.0:>7.2f}x", flush=True)
    for policy in args.policy or ("os", "fsync"):
        with EmbeddedBroker(settings={"log.flush.policy": policy}) as broker:
            _create(broker.bootstrap, "plain")
            _create(broker.bootstrap, "txn")
            _create(broker.bootstrap, "tiny")
            # Best of several runs each: on two cores one run alone is noisy.
            plain = txn = tps = 0.0
            if run_stream:
                plain, txn = _streams(broker.bootstrap, "plain", "txn", count)
            if run_tiny:
                tps = max(tiny_transactions(broker.bootstrap, "tiny", seconds) for _ in range(2))
        print(f"{'exactly ' + policy:<16} {plain:>17,.0f} {txn:>18,.0f} {_loss(plain, txn):>6.1f}%   "
              f"{tps:>16,.0f} {tps / mock_tps if mock_tps else 0.0:>7.2f}x", flush=True)


def _streams(bootstrap: str, plain_topic: str, txn_topic: str, count: int) -> tuple[float, float]:
    """Best of three of each stream, idempotent and transactional runs taking turns: written one
    after the other, the later runs would find the page cache full of the earlier runs' dirty
    pages (writeback throttles pwritev), which charges the order of the runs to transactions."""
    plain, txn = [], []
    for _ in range(3):
        plain.append(stream(bootstrap, plain_topic, count, txn_ms=None))
        txn.append(stream(bootstrap, txn_topic, count, txn_ms=100))
    return max(plain), max(txn)


def _loss(plain: float, txn: float) -> float:
    return (1 - txn / plain) * 100 if plain else 0.0


if __name__ == "__main__":
    main()
