"""Exactly-once read-process-write from a share group (KIP-932) with transactional
acknowledgements (KIP-1289, seed 004 use case 4.2), over TCP with Exactly's client: workers
(tests/workers/share_eos_worker.py) killed with SIGKILL at random moments and restarted, one
alone and then two sharing the input partition, still yield output that is exactly the
transformed input, every input record acknowledged and no transaction left open. And a
transaction's abort: its records come again with a higher delivery count and are then
committed once.

A dead worker's transaction is ended by the coordinator's session timeout (KIP-1309): each
incarnation has a new transactional id, so no InitProducerId of a successor aborts it. The
group's short lock duration bounds how long the records a dead member acquired but had not
yet staged stay out of reach.
"""

from __future__ import annotations

import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from exactly.client import Consumer, Producer, ShareConsumer, TransactionSession
from exactly.protocol.apis import ApiKey
from exactly.testing import EmbeddedBroker
from tests.helpers.share.helpers import SETTINGS, create_topic, set_group_configs
from tests.helpers.share.raw import start_offset
from tests.integration.client.test_share_consumer import _consumer, _poll_until
from tests.paths import WORKERS
from tests.rawclient import RawConnection
from tests.system.test_eos_pipeline import Worker, _check_output
from tests.workers.eos_worker import transform

WORKER = WORKERS / "share_eos_worker.py"
SESSION_TIMEOUT_MS = 1500  # the workers' transaction.session.timeout.ms (heartbeats every 500)
BROKER = {**SETTINGS, "log.flush.policy": "os",
          "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings=BROKER) as b:
        yield b


def _input(b: EmbeddedBroker, name: str, count: int) -> list[str]:
    """Topics `name` (with `count` distinct values on partition 0) and `name`-out, and share
    group `name` reading from the start with a short lock and the largest delivery limit (a
    record may be in flight at several kills)."""
    create_topic(b, name)
    create_topic(b, f"{name}-out")
    set_group_configs(b, name, share_auto_offset_reset="earliest",
                      share_record_lock_duration_ms="1000", share_delivery_count_limit="10")
    values = [f"item-{i}" for i in range(count)]
    # One batch per record: a share fetch acquires whole batches (KIP-932 as Kafka 4.2+ does
    # it), and the workers are to take a few records at a time.
    with Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0}) as p:
        for v in values:
            p.send(name, value=v.encode(), partition=0)
            p.flush()
    return values


class ShareWorker(Worker):
    """The classic pipeline's worker process handle, running share_eos_worker.py under a new
    transactional id at each start."""

    def __init__(self, b: EmbeddedBroker, name: str, slot: int, batch: int,
                 log_dir: Path) -> None:
        super().__init__(b, f"{name}-{slot}", name, f"{name}-out", batch, log_dir)
        self.head = [sys.executable, str(WORKER), b.bootstrap, name]
        self.tail = [name, f"{name}-out", str(batch), str(SESSION_TIMEOUT_MS)]
        self.txn_id = f"{name}-{slot}"

    def ensure_running(self) -> None:
        self.args = [*self.head, f"{self.txn_id}-{self.starts}", *self.tail]
        super().ensure_running()

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def commits(self) -> int:
        """Transactions the current incarnation committed (-1 before it is ready)."""
        lines = self.output().splitlines()
        readies = [i for i, line in enumerate(lines) if line == "ready"]
        if len(readies) < self.starts:
            return -1
        return sum(line.startswith("committed") for line in lines[readies[-1]:])

    def redelivered_commits(self) -> int:
        """Its transactions that committed records delivered more than once."""
        return len(re.findall(r"delivery count (?!1\))\d+", self.output()))


def _open_transactions(b: EmbeddedBroker) -> tuple[object, ...]:
    conn = RawConnection(b.host, b.port)
    try:
        return conn.request(ApiKey.LIST_TRANSACTIONS, 0, state_filters=OPEN_STATES,
                            producer_id_filters=()).transaction_states
    finally:
        conn.close()


def _wait_for(what: str, done: Callable[[], bool], timeout: float,
              workers: Sequence[ShareWorker] = ()) -> None:
    """Until `done()` is true (restarting dead workers meanwhile), or fail saying `what`."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        for w in workers:
            w.ensure_running()
        time.sleep(0.05)


def _run_with_kills(b: EmbeddedBroker, name: str, count: int, slots: int, kills: int,
                    seed: int, log_dir: Path) -> None:
    values = _input(b, name, count)
    workers = [ShareWorker(b, name, slot, batch=5, log_dir=log_dir) for slot in range(slots)]
    rng = random.Random(seed)
    try:
        for w in workers:
            w.ensure_running()
        # The moments: a random worker, after a random number of its own commits (in its loop
        # from then on: nearly always holding, staging or committing records), so the input
        # does not run out before the last kill, however fast the machine.
        for _ in range(kills):
            victim = rng.choice(workers)
            wanted = rng.randint(1, 10)
            _wait_for(f"{victim.txn_id} to commit {wanted} transactions",
                      lambda: victim.commits() >= wanted, 30)  # noqa: B023
            time.sleep(rng.uniform(0, 0.02))
            victim.kill()
            victim.ensure_running()
        _wait_for(f"every record of {name} acknowledged",
                  lambda: start_offset(b, name, name, 0) == count, 60, workers)
    finally:
        for w in workers:
            w.kill()
    assert sum(w.starts for w in workers) == slots + kills
    # The kills hit records in flight: some came again and were committed then.
    assert sum(w.redelivered_commits() for w in workers) > 0
    # The dead incarnations' transactions end by the session timeout (3 x the heartbeat).
    _wait_for("no transaction open", lambda: _open_transactions(b) == (), 10)
    _check_output(b, values, f"{name}-out", 1)


def test_worker_killed_at_random_moments_output_is_exactly_the_transformed_input(
        broker: EmbeddedBroker, tmp_path: Path) -> None:
    _run_with_kills(broker, "sp-one", count=1500, slots=1, kills=4, seed=16, log_dir=tmp_path)


def test_two_workers_share_the_input_partition_through_kills(broker: EmbeddedBroker,
                                                             tmp_path: Path) -> None:
    _run_with_kills(broker, "sp-two", count=2000, slots=2, kills=4, seed=1289,
                    log_dir=tmp_path)


def _committed_output(b: EmbeddedBroker, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every committed record of the topic's partition 0."""
    with Consumer({"bootstrap.servers": b.bootstrap, "isolation.level": "read_committed",
                   "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([(topic, 0)])
        out: list[tuple[bytes | None, bytes | None]] = []
        while batch := consumer.poll(1000):
            out += [(r.key, r.value) for r in batch]
        return out


def test_aborted_transaction_records_come_again_and_commit_once(broker: EmbeddedBroker) -> None:
    name = "sp-abort"
    values = _input(broker, name, 6)
    consumer: ShareConsumer = _consumer(broker, name, name,
                                        share_acknowledgement_mode="explicit")
    session = TransactionSession({"bootstrap.servers": broker.bootstrap,
                                  "transactional.id": f"{name}-worker"})
    session.initialize()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0}, session=session)

    def process(commit: bool) -> list[tuple[int, int]]:
        records = sorted(_poll_until(consumer, 6), key=lambda r: r.offset)
        session.begin_transaction()
        for r in records:
            producer.send(f"{name}-out", value=transform(r.value or b""),
                          key=b"%d" % r.offset, partition=0)
        consumer.acknowledge_transactionally(session, {(name, 0): [r.offset for r in records]})
        if commit:
            session.commit_transaction()
        else:
            session.abort_transaction()
        return [(r.offset, r.delivery_count) for r in records]

    try:
        assert process(commit=False) == [(o, 1) for o in range(6)]
        assert process(commit=True) == [(o, 2) for o in range(6)]  # released by the abort
        assert consumer.poll(1000) == []
        assert start_offset(broker, name, name, 0) == 6
    finally:
        producer.close()
        session.close()
        consumer.close()
    out = _committed_output(broker, f"{name}-out")
    assert Counter(out) == Counter((b"%d" % i, transform(v.encode()))
                                   for i, v in enumerate(values))
    assert len(out) == 6  # the aborted attempt's output is not there
