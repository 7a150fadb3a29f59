"""Exactly-once consume-transform-produce with send_offsets_to_transaction and a consumer group:
workers killed with SIGKILL and restarted many times, and the broker itself killed at random
moments, still yield output that is exactly the transformed input (DESIGN invariants 1–4, 7)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from exactly.protocol.apis import ApiKey
from exactly.testing import EmbeddedBroker
from exactly.testing.logs import attach_log, kept_logs_dir, unique_path
from tests.paths import WORKERS
from tests.rawclient import RawConnection
from tests.support import create_topic, end_offsets, produce_confluent
from tests.system.interop.test_transactions import read_all
from tests.workers.eos_worker import transform

WORKER = WORKERS / "eos_worker.py"
SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


class Worker:
    """A worker process (eos_worker.py); its output, every incarnation's, goes to
    `log_dir`/worker-TXN_ID.log (the test's tmp_path; by default the test's directory of kept
    logs), shown on the test's report if it fails (exactly.testing.logs)."""

    def __init__(self, broker: EmbeddedBroker, txn_id: str, in_topic: str, out_topic: str,
                 batch: int, log_dir: Path | None = None) -> None:
        self.args = [sys.executable, str(WORKER), broker.bootstrap, "ctp", txn_id, in_topic,
                     out_topic, str(batch)]
        path = unique_path(log_dir or kept_logs_dir(), f"worker-{txn_id}.log")
        self.log = open(path, "ab")  # noqa: SIM115
        attach_log(f"worker {txn_id}", path)
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def ensure_running(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=self.log)
            self.starts += 1

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _committed(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp"})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        consumer.close()
    return [tp.offset for tp in tps]


def _wait_until_all_consumed(broker, workers, in_topic, partitions, ends, timeout=180.0):
    deadline = time.monotonic() + timeout
    seen: object = None
    while time.monotonic() < deadline:
        for w in workers:
            w.ensure_running()
        try:
            seen = _committed(broker.bootstrap, in_topic, partitions)
        except Exception as exc:  # noqa: BLE001 - the broker may still be starting
            seen = exc
        if seen == ends:
            return
        time.sleep(0.5)
    raise AssertionError(f"committed offsets {seen} never reached {ends}")


def _open_transactions(broker) -> tuple:
    conn = RawConnection(broker.host, broker.port)
    try:
        return conn.request(ApiKey.LIST_TRANSACTIONS, 0, state_filters=(
            "Ongoing", "PrepareCommit", "PrepareAbort"), producer_id_filters=()).transaction_states
    finally:
        conn.close()


def _check_output(broker, values, out_topic, partitions):
    # No transaction is left open. A worker killed at the end may have just begun one: the
    # coordinator aborts it when its transaction.timeout.ms (10 s in eos_worker.py) has passed.
    deadline = time.monotonic() + 60
    while (still_open := _open_transactions(broker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert still_open == (), f"transactions still open 60 s after the workers stopped: {still_open}"
    out = read_all(broker.bootstrap, out_topic, at_least=len(values), idle=2.0, timeout=90)
    assert len(out) == len(values), f"{len(out)} output records for {len(values)} input records"
    assert sorted(out) == sorted(transform(v.encode()).decode() for v in values)
    # read_committed and read_uncommitted end at the same offset.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lso",
                         "isolation.level": "read_committed"})
    try:
        for p in range(partitions):
            tp = TopicPartition(out_topic, p)
            lso = consumer.get_watermark_offsets(tp, timeout=10)[1]
            hwm = end_offsets(broker.bootstrap, out_topic, partitions)[p]
            assert lso == hwm, f"{out_topic}-{p}: LSO {lso} behind high watermark {hwm}"
    finally:
        consumer.close()


def test_worker_killed_many_times_output_is_exactly_the_transformed_input(tmp_path):
    with EmbeddedBroker(settings={**SETTINGS, "log.flush.policy": "os"}) as broker:
        create_topic(broker.bootstrap, "ctp-in", partitions=3)
        create_topic(broker.bootstrap, "ctp-out", partitions=3)
        values = [f"record-{i}" for i in range(3000)]
        placed = produce_confluent(broker.bootstrap, "ctp-in", [v.encode() for v in values],
                                   keys=[str(i).encode() for i in range(len(values))])
        ends = [1 + max((o for p, o in placed if p == q), default=-1) for q in range(3)]
        worker = Worker(broker, "ctp-worker", "ctp-in", "ctp-out", batch=20, log_dir=tmp_path)
        rng = random.Random(42)
        try:
            for _ in range(8):
                worker.ensure_running()
                time.sleep(rng.uniform(1.5, 3.5))
                worker.kill()
            _wait_until_all_consumed(broker, [worker], "ctp-in", 3, ends)
        finally:
            worker.kill()
        assert worker.starts >= 9
        _check_output(broker, values, "ctp-out", 3)


def test_broker_killed_at_random_moments_during_transactions(tmp_path):
    with EmbeddedBroker(settings=SETTINGS) as broker:  # default flush policy: fsync
        create_topic(broker.bootstrap, "chaos-in", partitions=6)
        create_topic(broker.bootstrap, "chaos-out", partitions=6)
        values = [f"event-{i}" for i in range(4000)]
        placed = produce_confluent(broker.bootstrap, "chaos-in", [v.encode() for v in values],
                                   keys=[str(i).encode() for i in range(len(values))])
        ends = [1 + max((o for p, o in placed if p == q), default=-1) for q in range(6)]
        # 3 workers in one group, transactions of at most 15 records: at least 267 of them.
        workers = [Worker(broker, f"chaos-{i}", "chaos-in", "chaos-out", batch=15,
                          log_dir=tmp_path) for i in range(3)]
        seed = int(os.environ.get("EXACTLY_CHAOS_SEED", "7"))  # bench/eos_chaos.py varies it
        rng = random.Random(seed)
        print(f"seed {seed}, broker data in {broker.data_dir}")
        try:
            for _ in range(5):
                for w in workers:
                    w.ensure_running()
                time.sleep(rng.uniform(2.0, 5.0))
                broker.kill()
                time.sleep(rng.uniform(0.0, 1.0))
                broker.start()
            _wait_until_all_consumed(broker, workers, "chaos-in", 6, ends, timeout=240)
        finally:
            for w in workers:
                w.kill()
        assert broker.starts >= 6
        _check_output(broker, values, "chaos-out", 6)
