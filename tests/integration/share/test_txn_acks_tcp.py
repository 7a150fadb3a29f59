"""Transactional acknowledgements (KIP-1289) over TCP with Exactly's client: a share consumer's
records acknowledged in a TransactionSession's transaction, next to the output it writes.
Commit: acknowledged, never redelivered. Abort: redelivered with delivery count 2. The broker
killed (kill -9) between the staging and the commit: the commit after the restart applies them.
The worker killed before its commit: the transaction times out and the records are redelivered.
The broker killed after the commit's decision, before its markers: rolled forward at restart.
The checks of TxnShareAcknowledge (member, producer, records) on the wire.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from exactly import failpoints
from exactly.client import Consumer, Producer, ShareConsumer, ShareRecord, TransactionSession
from exactly.protocol.apis import ApiKey, build
from exactly.protocol.drafts import txn_share_acknowledge as tsa
from exactly.protocol.errors import ErrorCode
from exactly.testing import EmbeddedBroker
from tests.helpers.share.helpers import SETTINGS, create_topic, set_group_configs
from tests.helpers.share.raw import describe_share_group, start_offset
from tests.integration.client.test_share_consumer import _consumer, _poll_until
from tests.rawclient import RawConnection

BROKER = {**SETTINGS, "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings=BROKER) as b:
        yield b


def _queue(b: EmbeddedBroker, name: str, count: int) -> None:
    """Topic `name` with `count` records (values = offsets), an output topic `name`-out, and
    share group `name` reading from the start."""
    create_topic(b, name)
    create_topic(b, f"{name}-out")
    set_group_configs(b, name, share_auto_offset_reset="earliest")
    with Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0}) as p:
        for i in range(count):
            p.send(name, value=b"%d" % i, partition=0)
        p.flush()


def _worker(b: EmbeddedBroker, name: str, count: int
            ) -> tuple[ShareConsumer, TransactionSession, list[ShareRecord]]:
    """Queue `name` with `count` records, a share consumer of group `name` that holds them
    all, and an initialized TransactionSession."""
    _queue(b, name, count)
    consumer = _consumer(b, name, name)
    session = TransactionSession({"bootstrap.servers": b.bootstrap,
                                  "transactional.id": f"{name}-worker"})
    session.initialize()
    return consumer, session, _poll_until(consumer, count)


def _process(b: EmbeddedBroker, session: TransactionSession, consumer: ShareConsumer,
             name: str, records: list[ShareRecord]) -> None:
    """Read-process-write in `session`'s open transaction: the output, and the input records
    acknowledged."""
    with Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0}, session=session) as p:
        for r in records:
            p.send(f"{name}-out", value=b"out-" + r.value, partition=0)
        p.flush()
    consumer.acknowledge_transactionally(session, {(name, 0): [r.offset for r in records]})


def _output(b: EmbeddedBroker, name: str, count: int) -> list[bytes]:
    """The committed output (read_committed), waiting for `count` records, then a little more
    for any extra."""
    with Consumer({"bootstrap.servers": b.bootstrap, "isolation.level": "read_committed",
                   "auto.offset.reset": "earliest"}) as c:
        c.assign([(f"{name}-out", 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 10
        while len(got) < count and time.monotonic() < deadline:
            got += [m.value for m in c.poll(200)]
        got += [m.value for m in c.poll(300)]
        return got


def test_commit_acknowledges_and_abort_redelivers(broker: EmbeddedBroker) -> None:
    consumer, session, records = _worker(broker, "ta-1", 6)
    try:
        first, rest = records[:3], records[3:]
        session.begin_transaction()
        _process(broker, session, consumer, "ta-1", first)
        session.commit_transaction()
        assert start_offset(broker, "ta-1", "ta-1", 0) == 3
        session.begin_transaction()
        _process(broker, session, consumer, "ta-1", rest)
        session.abort_transaction()
        # the aborted ones come back, once more delivered; the committed ones never
        again = _poll_until(consumer, 3)
        assert [(r.offset, r.delivery_count) for r in again] == [(3, 2), (4, 2), (5, 2)]
        session.begin_transaction()
        _process(broker, session, consumer, "ta-1", again)
        session.commit_transaction()
        assert start_offset(broker, "ta-1", "ta-1", 0) == 6
        assert consumer.poll(500) == []
        assert sorted(_output(broker, "ta-1", 6)) == [b"out-%d" % i for i in range(6)]
    finally:
        consumer.close()
        session.close()


def test_broker_killed_between_staging_and_commit(broker: EmbeddedBroker) -> None:
    consumer, session, records = _worker(broker, "ta-2", 4)
    try:
        session.begin_transaction()
        _process(broker, session, consumer, "ta-2", records)
        broker.restart(kill=True)  # kill -9: the staged acknowledgements are on disk only
        # the transaction is still open after the restart: its records are held, not delivered
        assert consumer.poll(1000) == []
        session.commit_transaction()
        deadline = time.monotonic() + 10
        while start_offset(broker, "ta-2", "ta-2", 0) != 4:
            assert time.monotonic() < deadline, "the commit was not applied"
            time.sleep(0.1)
        assert consumer.poll(500) == []
        assert sorted(_output(broker, "ta-2", 4)) == [b"out-%d" % i for i in range(4)]
    finally:
        consumer.close()
        session.close()


WORKER = """
import sys
from exactly.client import Producer, ShareConsumer, TransactionSession
bootstrap, name, extra = sys.argv[1], sys.argv[2], dict(a.split("=") for a in sys.argv[3:])
consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": name,
                          "fetch.max.wait.ms": 200})
consumer.subscribe([name])
session = TransactionSession({"bootstrap.servers": bootstrap, "transactional.id": name + "-w",
                              **extra})
session.initialize()
records = []
while len(records) < 3:
    records += consumer.poll(200)
session.begin_transaction()
with Producer({"bootstrap.servers": bootstrap, "linger.ms": 0}, session=session) as p:
    for r in records:
        p.send(name + "-out", value=b"out-" + r.value, partition=0)
    p.flush()
consumer.acknowledge_transactionally(session, {(name, 0): [r.offset for r in records]})
print("staged", flush=True)
sys.stdin.read()  # until killed
"""


@pytest.mark.parametrize("ends", [
    # the transaction times out (2 s)
    ("transaction.timeout.ms=2000",),
    # KIP-1309: its session expires without heartbeats (1.5 s), long before its timeout (60 s)
    ("transaction.timeout.ms=60000", "transaction.heartbeat.interval.ms=500",
     "transaction.session.timeout.ms=1500")], ids=["timeout", "session"])
def test_worker_killed_before_commit_records_redelivered(broker: EmbeddedBroker,
                                                         ends: tuple[str, ...]) -> None:
    name = f"ta-3-{len(ends)}"
    _queue(broker, name, 3)
    worker = subprocess.Popen([sys.executable, "-c", WORKER, broker.bootstrap, name, *ends],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "staged"
    finally:
        worker.kill()  # SIGKILL, before the commit
        worker.wait(10)
    consumer = _consumer(broker, name, name)
    try:
        # held until the coordinator aborts the transaction, then delivered again (within 20 s:
        # in the session case, not by the 60 s timeout)
        again = _poll_until(consumer, 3, timeout=20)
        assert [(r.offset, r.delivery_count) for r in again] == [(0, 2), (1, 2), (2, 2)]
        consumer.commit_sync()
        assert _output(broker, name, 0) == []  # the killed worker's output was aborted
    finally:
        consumer.close()


def test_commit_decided_then_broker_killed_is_rolled_forward(tmp_path: Path) -> None:
    """EndTxn answered (PrepareCommit durable), the broker killed before its markers: the
    restarted coordinator writes them, and the staged acknowledgements are applied."""
    paused = {**os.environ, failpoints.ENV: "txn.before_markers=pause:60"}
    data = tmp_path / "data"
    with EmbeddedBroker(data, settings=BROKER, env=paused) as b:
        consumer, session, records = _worker(b, "ta-4", 3)
        try:
            session.begin_transaction()
            _process(b, session, consumer, "ta-4", records)
            session.commit_transaction()  # answered; the markers wait at the pause
            assert start_offset(b, "ta-4", "ta-4", 0) == 0
        finally:
            consumer.close()
            session.close()
        b.kill()
        port = b.port
    with EmbeddedBroker(data, settings=BROKER, port=port) as b:
        assert start_offset(b, "ta-4", "ta-4", 0) == 3
        assert sorted(_output(b, "ta-4", 3)) == [b"out-%d" % i for i in range(3)]


def _txn_share_ack(b: EmbeddedBroker, *, txn_id: str, group: str, pid: int, epoch: int,
                   member: str, member_epoch: int, topic_id: uuid.UUID,
                   batches: tuple[tuple[int, int, tuple[int, ...]], ...]) -> tuple[int, int]:
    """A raw TxnShareAcknowledge for partition 0: (top-level error, the partition's error)."""
    request = build(
        tsa.TxnShareAcknowledgeRequest, transactional_id=txn_id, group_id=group,
        producer_id=pid, producer_epoch=epoch, member_id=member, member_epoch=member_epoch,
        topics=(build(tsa.TxnShareAcknowledgeTopic, topic_id=topic_id, partitions=(
            build(tsa.TxnShareAcknowledgePartition, partition_index=0, acknowledgement_batches=tuple(
                build(tsa.TxnShareAcknowledgeBatch, first_offset=f, last_offset=last,
                      acknowledge_types=types) for f, last, types in batches)),)),))
    conn = RawConnection(b.host, b.port)
    try:
        conn.send_bytes(conn.frame(ApiKey.TXN_SHARE_ACKNOWLEDGE, 0, request))
        r = conn.read_response(ApiKey.TXN_SHARE_ACKNOWLEDGE, 0)
    finally:
        conn.close()
    parts = [p.error_code for t in r.responses for p in t.partitions]
    return int(r.error_code), int(parts[0]) if parts else 0


def test_member_producer_and_records_are_checked(broker: EmbeddedBroker) -> None:
    consumer, session, _ = _worker(broker, "ta-5", 3)
    try:
        meta = consumer.group_metadata()
        topic_id = describe_share_group(broker, "ta-5").members[0].assignment.topic_partitions[
            0].topic_id
        pid, epoch = session.producer_id, session.producer_epoch

        def ack(*batches: tuple[int, int, tuple[int, ...]], member: str = meta.member_id,
                member_epoch: int = meta.member_epoch, producer_epoch: int = epoch
                ) -> tuple[int, int]:
            return _txn_share_ack(broker, txn_id="ta-5-worker", group="ta-5", pid=pid,
                                  epoch=producer_epoch, member=member, member_epoch=member_epoch,
                                  topic_id=topic_id, batches=batches)

        accept = (0, 0, (1,))
        # no transaction open yet
        assert ack(accept) == (ErrorCode.invalid_txn_state, 0)
        session.begin_transaction()
        with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0},
                      session=session) as p:
            p.send("ta-5-out", value=b"x", partition=0)
            p.flush()
        assert ack(accept, member="nobody") == (ErrorCode.unknown_member_id, 0)
        assert ack(accept, member_epoch=meta.member_epoch + 1) == (
            ErrorCode.fenced_member_epoch, 0)
        assert ack(accept, producer_epoch=epoch + 1) == (ErrorCode.producer_fenced, 0)
        assert ack((0, 0, (2,))) == (0, ErrorCode.invalid_request)  # RELEASE
        assert ack((0, 5, (1,))) == (0, ErrorCode.invalid_record_state)  # 3-5 not held
        assert ack((0, 1, (1, 3))) == (0, 0)  # accept 0, reject 1: staged
        assert ack(accept) == (0, ErrorCode.invalid_record_state)  # TX_PENDING now
        session.abort_transaction()
        again = _poll_until(consumer, 2)
        assert sorted((r.offset, r.delivery_count) for r in again) == [(0, 2), (1, 2)]
    finally:
        consumer.close()
        session.close()
