"""A transaction version 1 client under log.flush.policy=fsync (issue 19, item 3): its
AddPartitionsToTxn is answered once the coordinator's Ongoing record is written, and the first
Produce of the transaction into the partition is answered after one round that syncs the data
and that record together (server/transactions.py gives the argument).

Counted and cut on the power-cut filesystem (exactly.testing.powercut), with exact requests over
TCP (AddPartitionsToTxn v3, Produce v9, EndTxn v3, as librdkafka sends them): a power cut right
after the AddPartitionsToTxn answer loses the partition and leaves nothing open; a cut right
after the Produce answer keeps both, and the transaction then commits. DESIGN invariants 1
(acknowledged means durable), 3 (read_committed sees exactly the committed records) and 7 (no
transaction left open after a restart) are checked after each cut.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from exactly.protocol.errors import ErrorCode
from exactly.testing import EmbeddedBroker
from exactly.testing.powercut import PowerCutFS
from tests.rawclient import RawConnection
from tests.server.powercut_load import read_committed
from tests.server.test_kip890 import TOPIC, add_partition, end_txn, init, offsets, produce
from tests.support import create_topic

TXN_LOG = "__transaction_state-"
TXN_ID = "v1-client"


@pytest.fixture
def power_cut_fs(tmp_path: Path) -> Iterator[PowerCutFS]:
    with PowerCutFS(tmp_path / "mnt") as fs:
        yield fs


def _broker(fs: PowerCutFS, **settings: object) -> EmbeddedBroker:
    # No periodic flush of every log: only the requests' own syncs reach the disk.
    return EmbeddedBroker(data_dir=fs.make_durable_dir("data"),
                          settings={"log.flush.policy": "fsync",
                                    "log.flush.offset.checkpoint.interval.ms": 600_000,
                                    **settings})


@pytest.fixture
def broker(power_cut_fs: PowerCutFS) -> Iterator[EmbeddedBroker]:
    with _broker(power_cut_fs) as b:
        create_topic(b.bootstrap, TOPIC, partitions=2)
        yield b


def _syncs(fs: PowerCutFS) -> tuple[int, int]:
    """(syncs of the transaction log, of the topic's partitions) so far."""
    by_dir = fs.file_fsyncs_by_dir()
    return (sum(n for d, n in by_dir.items() if d.startswith(TXN_LOG)),
            sum(n for d, n in by_dir.items() if d.startswith(f"{TOPIC}-")))


@contextmanager
def _connection(broker: EmbeddedBroker) -> Iterator[RawConnection]:
    conn = RawConnection(broker.host, broker.port)
    try:
        yield conn
    finally:
        conn.close()


def _cut_and_restart(broker: EmbeddedBroker, fs: PowerCutFS) -> None:
    broker.kill()
    fs.cut()
    broker.start()


def test_the_produce_syncs_the_partition_its_add_partitions_wrote(
        broker: EmbeddedBroker, power_cut_fs: PowerCutFS) -> None:
    with _connection(broker) as conn:
        pid, epoch = init(conn, TXN_ID)
        before = _syncs(power_cut_fs)
        assert add_partition(conn, TXN_ID, pid, epoch, 0) == ErrorCode.none
        assert _syncs(power_cut_fs) == before  # answered without a sync
        assert produce(conn, 9, TXN_ID, pid, epoch, 0, 0, b"a") == ErrorCode.none
        # One round: the data, and the Ongoing record with it.
        assert _syncs(power_cut_fs) == (before[0] + 1, before[1] + 1)
        assert end_txn(conn, 3, TXN_ID, pid, epoch, True)[0] == ErrorCode.none
        assert _syncs(power_cut_fs)[0] == before[0] + 2  # PrepareCommit


def test_without_verification_the_add_partitions_answer_waits_for_its_sync(
        power_cut_fs: PowerCutFS) -> None:
    # Unverified, a write the coordinator does not know could follow a cut (and stay open until
    # the next restart): the Ongoing record is durable before the client may write.
    with _broker(power_cut_fs, **{"transaction.partition.verification.enable": "false"}) as b:
        create_topic(b.bootstrap, TOPIC, partitions=2)
        with _connection(b) as conn:
            pid, epoch = init(conn, TXN_ID)
            before = _syncs(power_cut_fs)
            assert add_partition(conn, TXN_ID, pid, epoch, 0) == ErrorCode.none
            assert _syncs(power_cut_fs) == (before[0] + 1, before[1])


def test_a_cut_after_the_add_partitions_answer_leaves_nothing_open(
        broker: EmbeddedBroker, power_cut_fs: PowerCutFS) -> None:
    with _connection(broker) as conn:
        pid, epoch = init(conn, TXN_ID)
        assert add_partition(conn, TXN_ID, pid, epoch, 0) == ErrorCode.none
    _cut_and_restart(broker, power_cut_fs)
    with _connection(broker) as conn:
        # The partition was not durable in the coordinator: the client's Produce is refused
        # (nothing is written), and so is its commit; it starts over.
        assert produce(conn, 9, TXN_ID, pid, epoch, 0, 0, b"lost") == ErrorCode.invalid_txn_state
        assert end_txn(conn, 3, TXN_ID, pid, epoch, True)[0] == ErrorCode.invalid_txn_state
        high, stable = offsets(conn, 0)
        assert high == stable == 0  # nothing written, nothing open (invariant 7)
        pid, epoch = init(conn, TXN_ID)
        assert add_partition(conn, TXN_ID, pid, epoch, 0) == ErrorCode.none
        assert produce(conn, 9, TXN_ID, pid, epoch, 0, 0, b"again") == ErrorCode.none
        assert end_txn(conn, 3, TXN_ID, pid, epoch, True)[0] == ErrorCode.none
    found, problems = read_committed(broker.bootstrap, {TOPIC: 2})
    assert problems == []
    assert set(found) == {b"again"}


def test_a_cut_after_the_produce_answer_keeps_the_partition_in_the_transaction(
        broker: EmbeddedBroker, power_cut_fs: PowerCutFS) -> None:
    with _connection(broker) as conn:
        pid, epoch = init(conn, TXN_ID)
        assert add_partition(conn, TXN_ID, pid, epoch, 1) == ErrorCode.none
        assert produce(conn, 9, TXN_ID, pid, epoch, 0, 1, b"kept") == ErrorCode.none
    _cut_and_restart(broker, power_cut_fs)
    with _connection(broker) as conn:
        # The record is on disk and still in the open transaction, which the coordinator holds:
        # the client's commit goes through (invariant 1), and only then is the record visible.
        high, stable = offsets(conn, 1)
        assert (high, stable) == (1, 0)
        assert end_txn(conn, 3, TXN_ID, pid, epoch, True)[0] == ErrorCode.none
    found, problems = read_committed(broker.bootstrap, {TOPIC: 2})
    assert problems == []  # no transaction left open (invariant 7)
    assert found == {b"kept": [(TOPIC, 1, 0)]}  # invariant 3
