"""What transactions cost, with confluent-kafka, side by side in one run.

1. Throughput of a 1 KiB stream written in transactions of 100 ms against the same stream written
   idempotently without transactions (figure published for Kafka: at most 3% lost), on Exactly
   and on the mock: what the client itself loses by stopping at each commit shows in the mock's
   figure. Runs of the two kinds alternate in pairs, each run into a topic of its own that is
   deleted after it (so no run meets the dirty pages of the runs before it); the loss printed is
   the median of the pairs' losses, with the lowest and highest.
2. Sequential 1-record transactions per second from one producer: Exactly against librdkafka's
   mock cluster (which has a transaction coordinator of its own), and against a null broker
   (`bench/null_broker.py`: Python answering with no work at all, the ceiling for any broker
   written in Python on this machine). Beside each figure, the broker process's CPU
   microseconds per transaction (user + system, from /proc): unlike the rates, a figure that
   load on a shared machine hardly distorts.

Exactly runs with `log.flush.policy=os` (as durable as the mock: neither fsyncs) and with the
default `fsync`.

`--pin` puts each broker process (the null broker, Exactly) on CPU 1 and this process (the client,
and the mock, which runs inside it) on CPU 0: the broker's caches then hold only its own work
between two requests, where unpinned the client's threads run on the same core in between. It
tells how much of the broker's CPU per transaction is that interference; the mock, sharing the
client's core, is not a peer in that mode.

    .venv/bin/python bench/transactions.py [--quick] [--only tiny|stream] [--policy os|fsync] [--pairs N] [--pin]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from measure import cpu_seconds

from exactly.testing import EmbeddedBroker

PARTITIONS = 4
CLIENT_CPU, BROKER_CPU = 0, 1  # --pin


def _pin(pid: int) -> None:
    """Every thread of process `pid` on BROKER_CPU (threads it starts later inherit it)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), {BROKER_CPU})


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


def tiny_transactions(bootstrap: str, topic: str, seconds: float,
                      pid: int | None = None) -> tuple[float, float]:
    """Sequential transactions of one record each: per second, and the CPU microseconds the
    broker process `pid` spent per transaction (from /proc; 0 without a pid)."""
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": f"bench-tiny-{time.monotonic_ns()}", "linger.ms": 0})
    producer.init_transactions(30)
    done = 0
    cpu = cpu_seconds(pid) if pid else 0.0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        producer.begin_transaction()
        producer.produce(topic, b"x" * 100)
        producer.commit_transaction(30)
        done += 1
    tps = done / (time.perf_counter() - started)
    return tps, ((cpu_seconds(pid) - cpu) / done * 1e6 if pid else 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    parser.add_argument("--only", choices=("tiny", "stream"),
                        help="run one of the two measurements (the other's columns print 0)")
    parser.add_argument("--policy", choices=("os", "fsync"), action="append",
                        help="log.flush.policy to run Exactly with (repeatable; default both)")
    parser.add_argument("--pairs", type=int, help="pairs of stream runs (default 10, quick 3)")
    parser.add_argument("--pin", action="store_true",
                        help="brokers on CPU 1, this process (client and mock) on CPU 0")
    args = parser.parse_args()
    if args.pin:
        os.sched_setaffinity(0, {CLIENT_CPU})
    run_tiny, run_stream = args.only in (None, "tiny"), args.only in (None, "stream")
    count = 40_000 if args.quick else 400_000  # a run holds about ten 100 ms transactions
    pairs = args.pairs or (3 if args.quick else 10)
    seconds = 2.0 if args.quick else 8.0

    mock = Producer({"test.mock.num.brokers": 1})  # hosts the mock cluster for this run
    (meta,) = mock.list_topics(timeout=10).brokers.values()
    mock_bootstrap = f"{meta.host}:{meta.port}"
    mock_tps = 0.0
    mock_stream: tuple[float, float, list[float]] = (0.0, 0.0, [])
    if run_tiny:
        mock_tps = max(tiny_transactions(mock_bootstrap, "mock-tiny", seconds)[0]
                       for _ in range(2))
    if run_stream:
        # The mock keeps only 5 MiB per partition, which does not matter when nothing reads
        # back, and it has no disk: its topics are auto-created and kept.
        mock_stream = _streams(mock_bootstrap, "mock", count, pairs, fresh_topics=False)

    print(f"{'target':<16} {'idempotent rec/s':>17} {'100 ms txns rec/s':>18} {'loss':>7} "
          f"{'(pairs: lowest, highest)':>25}   {'1-record txns/s':>16} {'vs mock':>8} "
          f"{'vs null':>8} {'broker CPU us/txn':>18}")
    _row("librdkafka mock", mock_stream, (mock_tps, 0.0), mock_tps)
    null = (0.0, 0.0)
    if run_tiny:
        server = _null_broker()
        with server as bootstrap:
            if args.pin:
                _pin(server.process.pid)
            null = max(tiny_transactions(bootstrap, "tiny", seconds, server.process.pid)
                       for _ in range(2))
        _row("null broker", None, null, mock_tps, null)
    for policy in args.policy or ("os", "fsync"):
        with EmbeddedBroker(settings={"log.flush.policy": policy}) as broker:
            assert broker.process is not None
            if args.pin:  # before any run: it starts on this process's CPU, as its child
                _pin(broker.process.pid)
            streams: tuple[float, float, list[float]] = (0.0, 0.0, [])
            tiny = (0.0, 0.0)
            if run_stream:
                streams = _streams(broker.bootstrap, "stream", count, pairs, fresh_topics=True)
            if run_tiny:
                _create(broker.bootstrap, "tiny")
                tiny = max(tiny_transactions(broker.bootstrap, "tiny", seconds, broker.process.pid)
                           for _ in range(2))
        _row(f"exactly {policy}", streams, tiny, mock_tps, null)


def _row(name: str, streams: tuple[float, float, list[float]] | None, tiny: tuple[float, float],
         mock_tps: float, null: tuple[float, float] = (0.0, 0.0)) -> None:
    """`tiny`: 1-record transactions per second and the broker's CPU us per transaction (of the
    better of the two runs); `null`: the same of the null broker."""
    tps, cpu_us = tiny
    ratio = f"{tps / mock_tps:>7.2f}x" if mock_tps else f"{'-':>8}"
    ratio += f" {tps / null[0]:>7.2f}x" if null[0] and tps else f" {'-':>8}"
    ratio += f" {cpu_us:>18.0f}" if cpu_us else f" {'-':>18}"
    if streams is None or not streams[2]:
        left = f"{'-':>17} {'-':>18} {'-':>7} {'':>25}"
    else:
        plain, txn, losses = streams
        spread = f"({min(losses):.1f}%, {max(losses):.1f}%)"
        left = (f"{plain:>17,.0f} {txn:>18,.0f} {statistics.median(losses):>6.1f}% "
                f"{spread:>25}")
    print(f"{name:<16} {left}   {tps:>16,.0f} {ratio}", flush=True)


class _null_broker:
    """bench/null_broker.py in a process of its own, as the brokers it is compared with."""

    def __enter__(self) -> str:
        script = Path(__file__).with_name("null_broker.py")
        self.process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                                        text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("null broker on "):
            self.process.kill()
            raise RuntimeError(f"null broker did not start: {line!r}")
        return line.removeprefix("null broker on ").strip()

    def __exit__(self, *_: object) -> None:
        self.process.kill()
        self.process.wait()


def _streams(bootstrap: str, prefix: str, count: int, pairs: int, *,
             fresh_topics: bool) -> tuple[float, float, list[float]]:
    """Alternating pairs of runs (which kind goes first alternates too). Returns the median of
    each kind and every pair's loss in %. With `fresh_topics` every run writes a topic of its
    own, deleted after it: a run never meets the dirty pages of the runs before it, whose
    writeback would otherwise charge the order of the runs to one kind."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    plain, txn, losses = [], [], []
    for i in range(pairs):
        got = {}
        for kind in (("plain", "txn") if i % 2 == 0 else ("txn", "plain")):
            topic = f"{prefix}-{kind}-{i}"
            if fresh_topics:
                admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
            got[kind] = stream(bootstrap, topic, count, txn_ms=100 if kind == "txn" else None)
            if fresh_topics:
                admin.delete_topics([topic])[topic].result(timeout=30)
        plain.append(got["plain"])
        txn.append(got["txn"])
        losses.append(_loss(got["plain"], got["txn"]))
    return statistics.median(plain), statistics.median(txn), losses


def _loss(plain: float, txn: float) -> float:
    return (1 - txn / plain) * 100 if plain else 0.0


if __name__ == "__main__":
    main()
