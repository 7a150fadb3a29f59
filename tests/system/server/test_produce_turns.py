"""A transaction version 2 Produce that adds partitions, under log.flush.policy=fsync, on a disk
whose syncs take seconds (tests.rigs.powercut, its latency raised once the broker is up and
the producer has its id): the partitions are made durable in the coordinator's log before the
data is appended (a power cut could otherwise leave data of a transaction nobody ends), by a
sync round the request waits for, not by a blocking sync of the event loop (issue 19).

- While it waits, the broker serves everybody else: another client's plain produce is answered
  while that sync is still running (the filesystem counts the syncs in progress and done, so no
  clock is read; the blocking sync of before fails this).
- The same producer's requests pipelined behind it keep their order: a request that adds a
  partition waits, and the next one, to a partition the transaction already wrote, would
  otherwise be appended first (OUT_OF_ORDER_SEQUENCE; `ProduceTurns` left out fails this).
- A new InitProducerId of the same transactional id, while the request waits, fences or aborts
  its data: no transaction is left open (DESIGN invariant 7).
- A power cut after the answers keeps the partitions in the transaction, which then commits
  every acknowledged record (DESIGN invariant 1); with that sync round left out on purpose (the
  fault point `produce.added_partitions.sync=skip`) the same check fails.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.produce.v12 import request as produce_v12
from kio.static.primitive import i16, i32

from exactly import failpoints
from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.errors import ErrorCode
from exactly.protocol.framing import decode_response
from exactly.protocol.records import Record, build_batch
from exactly.testing import EmbeddedBroker
from tests.helpers.server.powercut_load import read_committed
from tests.integration.server.test_kip890 import TOPIC, end_txn, init, offsets, produce
from tests.rawclient import RawConnection
from tests.rigs.powercut import PowerCutFS
from tests.support import create_topic

SLOW_SYNC_MS = 2000  # far longer than a request served meanwhile takes, even on a loaded machine


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[EmbeddedBroker, PowerCutFS]]:
    with PowerCutFS(tmp_path / "mnt") as fs, EmbeddedBroker(
            data_dir=fs.make_durable_dir("data"),
            settings={"log.flush.policy": "fsync",
                      "log.flush.offset.checkpoint.interval.ms": 600_000}) as b:
        create_topic(b.bootstrap, TOPIC, partitions=2)
        yield b, fs


def _send_produce(conn: RawConnection, txn_id: str, pid: int, epoch: int,
                  batches: list[tuple[int, int, bytes]]) -> None:
    """A Produce v12 (acks=all) of one record per (partition, sequence, value), its answer left
    to `_answer`."""
    data = tuple(produce_v12.PartitionProduceData(index=i32(partition), records=build_batch(
        [Record(None, value)], timestamp=1_700_000_000_000, producer_id=pid,
        producer_epoch=epoch, base_sequence=seq, transactional=True))
        for partition, seq, value in batches)
    request = build(request_class(ApiKey.PRODUCE, 12), transactional_id=txn_id, acks=i16(-1),
                    timeout=datetime.timedelta(seconds=30),
                    topic_data=(produce_v12.TopicProduceData(name=TOPIC, partition_data=data),))
    conn.send_bytes(conn.frame(ApiKey.PRODUCE, 12, request))


def _answer(conn: RawConnection) -> tuple[int, list[tuple[int, int]]]:
    """The next Produce v12 answer: its correlation id, and (error code, base offset) per
    partition."""
    correlation_id, response = decode_response(ApiKey.PRODUCE, 12, conn.read_frame())
    return correlation_id, [(p.error_code, p.base_offset)
                            for p in response.responses[0].partition_responses]


def _wait_for_a_sync(fs: PowerCutFS) -> dict[str, int]:
    deadline = time.monotonic() + 30
    while (stats := fs.stats())["fsyncs_in_progress"] == 0:
        assert time.monotonic() < deadline, "the broker never synced"
        time.sleep(0.01)
    return stats


def test_other_clients_are_served_while_the_added_partition_is_synced(broker) -> None:
    b, fs = broker
    txn, other = RawConnection(b.host, b.port), RawConnection(b.host, b.port)
    try:
        pid, epoch = init(txn, "turns-serve")
        fs.set_fsync_latency(SLOW_SYNC_MS)
        before = fs.stats()["file_fsyncs"]
        _send_produce(txn, "turns-serve", pid, epoch, [(0, 0, b"adds partition 0")])
        during = _wait_for_a_sync(fs)  # the coordinator's log, for the added partition
        # A plain acks=1 record waits for no sync: it is answered while that one runs.
        assert produce(other, 12, None, -1, -1, -1, 1, b"plain", acks=1) == \
            ErrorCode.none
        after = fs.stats()
        assert after["file_fsyncs"] == during["file_fsyncs"] == before, (before, during, after)
        assert after["fsyncs_in_progress"] >= 1
        assert _answer(txn)[1] == [(ErrorCode.none, 0)]
        assert end_txn(txn, 5, "turns-serve", pid, epoch, True)[0] == ErrorCode.none
    finally:
        txn.close()
        other.close()
    fs.set_fsync_latency(0)
    found, problems = read_committed(b.bootstrap, {TOPIC: 2})
    assert problems == []
    assert set(found) == {b"adds partition 0", b"plain"}


def test_pipelined_requests_of_the_producer_keep_their_order(broker) -> None:
    b, fs = broker
    conn = RawConnection(b.host, b.port)
    try:
        pid, epoch = init(conn, "turns-order")
        assert produce(conn, 12, "turns-order", pid, epoch, 0, 0, b"p0 seq 0") == ErrorCode.none
        fs.set_fsync_latency(SLOW_SYNC_MS / 4)  # the requests behind arrive at once anyway
        first = conn.correlation_id + 1
        # Partition 0 is in the transaction and has its data: only partition 1 is added, and
        # that request waits for it; the next one, to partition 0 alone, adds nothing.
        _send_produce(conn, "turns-order", pid, epoch, [(0, 1, b"p0 seq 1"), (1, 0, b"p1 seq 0")])
        _send_produce(conn, "turns-order", pid, epoch, [(0, 2, b"p0 seq 2")])
        answers = [_answer(conn) for _ in range(2)]
        assert [c for c, _ in answers] == [first, first + 1]
        assert [a for _, a in answers] == [[(ErrorCode.none, 1), (ErrorCode.none, 0)],
                                           [(ErrorCode.none, 2)]]
        assert end_txn(conn, 5, "turns-order", pid, epoch, True)[0] == ErrorCode.none
    finally:
        conn.close()
    fs.set_fsync_latency(0)
    found, problems = read_committed(b.bootstrap, {TOPIC: 2})
    assert problems == []
    assert found == {b"p0 seq 0": [(TOPIC, 0, 0)], b"p0 seq 1": [(TOPIC, 0, 1)],
                     b"p0 seq 2": [(TOPIC, 0, 2)], b"p1 seq 0": [(TOPIC, 1, 0)]}


def test_a_fence_while_the_request_waits_leaves_no_open_transaction(broker) -> None:
    b, fs = broker
    zombie, fencer = RawConnection(b.host, b.port), RawConnection(b.host, b.port)
    try:
        pid, epoch = init(zombie, "turns-fence")
        fs.set_fsync_latency(SLOW_SYNC_MS / 4)
        _send_produce(zombie, "turns-fence", pid, epoch, [(0, 0, b"zombie's")])
        _wait_for_a_sync(fs)
        new_pid, new_epoch = init(fencer, "turns-fence")  # the new instance: aborts, bumps
        assert (new_pid, new_epoch) > (pid, epoch)
        ((error, _),) = _answer(zombie)[1]
        # Appended before the abort's markers (then aborted with it) or after them (fenced).
        assert error in (ErrorCode.none, ErrorCode.invalid_producer_epoch), error
        high, stable = offsets(fencer, 0)
        assert high == stable  # nothing left open
    finally:
        zombie.close()
        fencer.close()
    fs.set_fsync_latency(0)
    found, problems = read_committed(b.bootstrap, {TOPIC: 2})
    assert problems == []
    assert b"zombie's" not in found


def _acknowledge_then_cut(fs: PowerCutFS, env: dict[str, str]) -> tuple[int, dict[bytes, list]]:
    """A transaction version 2 producer's records in partitions 0 and 1, each added by its
    Produce and acknowledged (acks=all); kill -9, a power cut, a restart; then the producer
    commits. Returns the commit's error and what read_committed finds."""
    broker = EmbeddedBroker(data_dir=fs.make_durable_dir("data"),
                            settings={"log.flush.policy": "fsync",
                                      "log.flush.offset.checkpoint.interval.ms": 600_000},
                            env=env)
    try:
        broker.start()
        create_topic(broker.bootstrap, TOPIC, partitions=2)
        conn = RawConnection(broker.host, broker.port)
        try:
            pid, epoch = init(conn, "cut-tv2")
            for partition in (0, 1):
                _send_produce(conn, "cut-tv2", pid, epoch, [(partition, 0, b"p%d" % partition)])
                assert _answer(conn)[1] == [(ErrorCode.none, 0)]
        finally:
            conn.close()
        broker.kill()
        fs.cut()
        broker.start()
        conn = RawConnection(broker.host, broker.port)
        try:
            error = end_txn(conn, 5, "cut-tv2", pid, epoch, True)[0]
        finally:
            conn.close()
        found, problems = read_committed(broker.bootstrap, {TOPIC: 2})
        assert problems == []  # whatever happened, nothing is left open (invariant 7)
        return error, found
    finally:
        broker.close()


def test_acknowledged_records_of_added_partitions_survive_a_power_cut(tmp_path: Path) -> None:
    with PowerCutFS(tmp_path / "mnt") as fs:
        error, found = _acknowledge_then_cut(fs, dict(os.environ))
    assert error == ErrorCode.none
    assert found == {b"p0": [(TOPIC, 0, 0)], b"p1": [(TOPIC, 1, 0)]}


def test_the_check_finds_the_loss_when_added_partitions_are_not_synced(tmp_path: Path) -> None:
    # The records are durable, the coordinator's Ongoing records are not: the restart aborts the
    # records as orphans, and the commit finds no transaction to commit.
    env = {**os.environ, failpoints.ENV: "produce.added_partitions.sync=skip"}
    with PowerCutFS(tmp_path / "mnt") as fs:
        error, found = _acknowledge_then_cut(fs, env)
    assert (error, found) == (ErrorCode.invalid_txn_state, {})
